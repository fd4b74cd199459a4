//! One connection's beanstalkd state, and [`Session::apply`], which runs a command against
//! it and the queue and answers a [`Reply`], without a socket.
//!
//! The state is beanstalkd's: the tube the connection uses, its watch list (in beanstalkd's
//! order: appended, and an ignored tube replaced by the last one), and the jobs it holds, each
//! with the receipt of its attempt and the deadline of its ttr. `release`, `bury` and `touch`
//! only apply to jobs this connection holds, as in beanstalkd; `delete` also removes a job
//! that nobody holds.
//!
//! The commands themselves are in [`super::cmd`], one file per group. A `reserve` that finds
//! no job answers [`Outcome::Wait`]: the connection sends what earlier commands answered and
//! then runs [`Session::wait_for_job`] while it keeps reading the socket (see
//! [`super::handler`]). [`Session::close`] gives back the jobs the connection still holds
//! (as beanstalkd does when a connection closes).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use delayq::{ErrorKind, ReleaseOptions, TopicStats};

use super::cmd::Wait;
use super::state::ServerState;
use crate::proto::{Command, Reply};

/// A job this connection holds.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub topic: String,
    pub task_id: String,
    pub receipt: String,
    /// When its ttr ends, as far as this session knows (epoch ms).
    pub deadline_ms: u64,
}

/// A command as a session runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    /// The command.
    pub command: Command,
    /// What followed a `put` line: its body and, if the client kept to the protocol,
    /// `\r\n`. Empty for every other command.
    pub data: Vec<u8>,
}

/// What a command comes to.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Send this reply.
    Reply(Reply),
    /// A `reserve` that must wait: send what is pending, then [`Session::wait_for_job`].
    Wait(Wait),
    /// End the connection (`quit`, or the queue shuts down).
    Close,
}

/// One connection's state.
pub(crate) struct Session {
    pub server: Arc<ServerState>,
    pub used: String,
    pub watch: Vec<String>,
    pub held: HashMap<u64, Held>,
    producer: bool,
    worker: bool,
}

impl Session {
    /// A connection opens: it uses and watches `default`.
    pub fn open(server: Arc<ServerState>) -> Session {
        let c = &server.counters;
        c.total_connections.fetch_add(1, Ordering::Relaxed);
        c.current_connections.fetch_add(1, Ordering::Relaxed);
        server.tubes.with("default", |t| {
            t.using += 1;
            t.watching += 1;
        });
        Session {
            server,
            used: "default".into(),
            watch: vec!["default".into()],
            held: HashMap::new(),
            producer: false,
            worker: false,
        }
    }

    /// Runs one command.
    pub async fn apply(&mut self, request: Request) -> Outcome {
        let reply = match request.command {
            Command::Put {
                pri,
                delay,
                ttr,
                bytes,
            } => self.put(pri, delay, ttr, bytes, request.data).await,
            Command::Use(tube) => self.use_tube(tube_name(tube)).await,
            Command::Reserve => return self.reserve(None).await,
            // A negative timeout waits like `reserve` (beanstalkd 1.12).
            Command::ReserveWithTimeout(secs) => {
                return self
                    .reserve(u64::try_from(secs).ok().map(|s| s * 1_000))
                    .await;
            }
            Command::ReserveJob(id) => self.reserve_job(id).await,
            Command::Delete(id) => self.delete(id).await,
            Command::Release { id, pri, delay } => self.release(id, pri, delay).await,
            Command::Bury { id, pri } => self.bury(id, pri).await,
            Command::Touch(id) => self.touch(id).await,
            Command::Watch(tube) => self.watch_tube(tube_name(tube)),
            Command::Ignore(tube) => self.ignore(tube_name(tube)).await,
            Command::Peek(id) => self.peek(id).await,
            Command::PeekReady => self.peek_state(delayq::State::Ready).await,
            Command::PeekDelayed => self.peek_state(delayq::State::Delayed).await,
            Command::PeekBuried => self.peek_state(delayq::State::Dead).await,
            Command::Kick(bound) => self.kick(bound).await,
            Command::KickJob(id) => self.kick_job(id).await,
            Command::StatsJob(id) => self.stats_job(id).await,
            Command::StatsTube(tube) => self.stats_tube(&tube_name(tube)).await,
            Command::Stats => self.stats().await,
            Command::ListTubes => self.list_tubes().await,
            Command::ListTubeUsed => Reply::Using(self.used.clone().into_bytes()),
            Command::ListTubesWatched => self.list_tubes_watched(),
            Command::PauseTube { tube, delay } => self.pause_tube(&tube_name(tube), delay).await,
            Command::Quit => return Outcome::Close,
        };
        Outcome::Reply(reply)
    }

    /// The queue's clock (epoch ms).
    pub fn now(&self) -> u64 {
        self.server.queue.context().clock.now_ms()
    }

    /// Counts this connection among the producers, once.
    pub fn set_producer(&mut self) {
        if !std::mem::replace(&mut self.producer, true) {
            let c = &self.server.counters;
            c.current_producers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts this connection among the workers, once.
    pub fn set_worker(&mut self) {
        if !std::mem::replace(&mut self.worker, true) {
            let c = &self.server.counters;
            c.current_workers.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Drops held jobs whose ttr has ended: the queue has handed them out again (beanstalkd
    /// moves them back to ready at that moment).
    pub fn prune_held(&mut self, now: u64) {
        self.held.retain(|_, h| h.deadline_ms > now);
    }

    /// The job `id` if this connection holds it and its ttr has not ended.
    pub fn take_held(&mut self, id: u64) -> Option<Held> {
        let now = self.now();
        self.prune_held(now);
        self.held.remove(&id)
    }

    /// Frees the tube `name` in the registry if nothing refers to it any more.
    pub async fn free_if_unused(&self, name: &str) {
        if self.server.tubes.is_referenced(name) {
            return;
        }
        let has = match self.server.queue.stats(name).await {
            Ok(s) => has_jobs(&s),
            // Unknown: keep it; the next list reconciles.
            Err(_) => true,
        };
        self.server.tubes.free_if_unused(name, has);
    }

    /// The connection is gone: give its jobs back and drop its references.
    pub async fn close(&mut self) {
        let queue = self.server.queue.clone();
        let now = self.now();
        self.prune_held(now);
        for (_, h) in self.held.drain() {
            // beanstalkd puts a closed connection's jobs back at once, as they were.
            let options = ReleaseOptions::default().receipt(h.receipt);
            if let Err(e) = queue.release(&h.topic, &h.task_id, options).await
                && !is_gone(&e)
            {
                tracing::warn!(topic = %h.topic, id = %h.task_id, error = %e,
                    "giving back a closed connection's job failed; its ttr brings it back");
            }
        }
        let c = &self.server.counters;
        c.current_connections.fetch_sub(1, Ordering::Relaxed);
        if self.producer {
            c.current_producers.fetch_sub(1, Ordering::Relaxed);
        }
        if self.worker {
            c.current_workers.fetch_sub(1, Ordering::Relaxed);
        }
        let used = std::mem::take(&mut self.used);
        self.server.tubes.with(&used, |t| t.using -= 1);
        self.free_if_unused(&used).await;
        for tube in std::mem::take(&mut self.watch) {
            self.server.tubes.with(&tube, |t| t.watching -= 1);
            self.free_if_unused(&tube).await;
        }
    }
}

/// A tube name the parser accepted (only ASCII name bytes) as a `String`.
pub(crate) fn tube_name(tube: Vec<u8>) -> String {
    String::from_utf8(tube).unwrap_or_default()
}

/// Whether a topic holds a job a beanstalk client can see.
pub(crate) fn has_jobs(s: &TopicStats) -> bool {
    s.delayed + s.ready + s.active + s.dead > 0
}

/// Whether an error says the job is not there for this command (unknown, in another state,
/// or held under another receipt).
pub(crate) fn is_gone(e: &delayq::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict)
}

/// The reply to a failed command `op`: `DRAINING` while the queue shuts down, else
/// `INTERNAL_ERROR` (logged).
pub(crate) fn internal(op: &str, e: &delayq::Error) -> Reply {
    if e.kind() == ErrorKind::ShuttingDown {
        return Reply::Draining;
    }
    tracing::warn!(op, error = %e, "beanstalk command failed");
    Reply::InternalError
}

#[cfg(test)]
mod tests;
