//! One connection: read lines, run commands against the queue, write replies.
//!
//! The session reads what the client sends into a [`LineReader`] and answers every complete
//! command in order, writing the replies of a batch of pipelined commands together. A `put`
//! is followed by its body, which the session reads itself (the body may hold any bytes,
//! `\r\n` included); a body that does not end with `\r\n` is refused with `EXPECTED_CRLF`
//! and a connection that ends inside a body adds nothing.
//!
//! The connection's state is beanstalkd's: the tube it uses, its watch list (in beanstalkd's
//! order: appended, and an ignored tube replaced by the last one), and the jobs it holds, each
//! with the receipt of its attempt and the deadline of its ttr. `release`, `bury` and `touch`
//! only apply to jobs this connection holds, as in beanstalkd; `delete` also removes a job
//! that nobody holds.
//!
//! A `reserve` first looks without waiting; then, if a held job's ttr ends within a second
//! (beanstalkd's safety margin) it answers `DEADLINE_SOON`, else it long-polls the watched
//! topics, in steps no longer than the queue's longest long-poll, until a job comes, its
//! timeout passes (`TIMED_OUT`) or a held job enters the safety margin (`DEADLINE_SOON`).
//! While it waits the session keeps reading the socket, so a client that goes away is noticed
//! at once: the wait ends and the jobs the connection held go back to READY.
//!
//! Hostile clients are held to the listener's timeouts (beanstalkd has none): a command line
//! must be complete within `read_timeout_ms` of its first byte, a job body within
//! `read_timeout_ms` of the end of its `put` line, and a reply must be taken by the client
//! within `read_timeout_ms`; else the connection is closed (a `put` cut this way adds
//! nothing). With `idle_timeout_ms` set, a connection that sends nothing for that long while
//! not in a `reserve` is closed too. A closed connection gives its jobs back as after `quit`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use delayq::{
    BuryOptions, Delivery, ErrorKind, MaxRetries, NewTask, PopOptions, ReleaseOptions, State,
    TopicStats,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::{Cmd, Shared};
use crate::proto::stats::{JobState, JobStats, ServerStats, TubeStats, tube_list};
use crate::proto::{Command, LineEvent, LineReader, ParseError, Reply};

/// beanstalkd's safety margin: a reserve answers `DEADLINE_SOON` when a job the connection
/// holds has less than this left of its ttr.
const SAFETY_MARGIN_MS: u64 = 1_000;

/// How much a session reads at once.
const READ_CHUNK: usize = 16 * 1024;

/// A job this connection holds.
#[derive(Debug, Clone)]
struct Held {
    topic: String,
    task_id: String,
    receipt: String,
    /// When its ttr ends, as far as this session knows (epoch ms).
    deadline_ms: u64,
}

/// Whether the session goes on after a command.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    /// `quit`, or the client went away.
    Stop,
}

struct Session<R, W> {
    shared: Arc<Shared>,
    r: R,
    w: W,
    lines: LineReader,
    out: Vec<u8>,
    used: String,
    watch: Vec<String>,
    held: HashMap<u64, Held>,
    producer: bool,
    worker: bool,
    close: watch::Receiver<bool>,
    /// When the first byte of the unfinished command line in `lines` arrived.
    partial_since: Option<Instant>,
}

/// Why a session cut its connection: the error its `serve` ends with.
fn cut(what: &str, limit: &str, ms: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} took longer than {limit} ({ms} ms); connection closed"),
    )
}

/// Serves one connection until it closes, `quit`, or the listener closes; then gives back
/// the jobs it holds.
pub(crate) async fn run<R, W>(shared: Arc<Shared>, r: R, w: W, close: watch::Receiver<bool>)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let c = &shared.counters;
    c.total_connections.fetch_add(1, Ordering::Relaxed);
    c.current_connections.fetch_add(1, Ordering::Relaxed);
    shared.tubes.with("default", |t| {
        t.using += 1;
        t.watching += 1;
    });
    let mut s = Session {
        shared: Arc::clone(&shared),
        r,
        w,
        lines: LineReader::new(),
        out: Vec::with_capacity(256),
        used: "default".into(),
        watch: vec!["default".into()],
        held: HashMap::new(),
        producer: false,
        worker: false,
        close,
        partial_since: None,
    };
    if let Err(e) = s.serve().await {
        tracing::debug!(error = %e, "beanstalk connection ended");
    }
    s.end().await;
}

impl<R, W> Session<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    async fn serve(&mut self) -> std::io::Result<()> {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            while let Some(event) = self.lines.next_event() {
                // What is left after a line arrived with it: its clock starts now.
                self.partial_since = Some(Instant::now());
                let flow = match event {
                    LineEvent::TooLong => {
                        self.reply(Reply::BadFormat);
                        Flow::Continue
                    }
                    LineEvent::Line(line) => self.command(&line).await?,
                };
                if flow == Flow::Stop {
                    return self.flush().await;
                }
            }
            self.flush().await?;
            let options = &self.shared.options;
            // An unfinished line must be completed in time; between commands, only an idle
            // limit applies, when one is set.
            let deadline = if self.lines.buffered() > 0 {
                let since = *self.partial_since.get_or_insert_with(Instant::now);
                let ms = options.read_timeout_ms;
                Some((
                    since + Duration::from_millis(ms),
                    ("a command line", "read_timeout_ms", ms),
                ))
            } else {
                self.partial_since = None;
                let ms = options.idle_timeout_ms;
                (ms > 0).then(|| {
                    let limit = ("an idle connection", "idle_timeout_ms", ms);
                    (Instant::now() + Duration::from_millis(ms), limit)
                })
            };
            let sleep = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let n = tokio::select! {
                n = self.r.read(&mut buf) => n?,
                _ = self.close.wait_for(|c| *c) => return Ok(()),
                () = sleep => {
                    let (what, limit, ms) = deadline.map(|(_, l)| l).unwrap_or_default();
                    return Err(cut(what, limit, ms));
                }
            };
            if n == 0 {
                return Ok(());
            }
            if self.lines.buffered() == 0 {
                self.partial_since = Some(Instant::now());
            }
            self.lines.feed(&buf[..n]);
        }
    }

    fn reply(&mut self, reply: Reply) {
        reply.encode(&mut self.out);
    }

    async fn flush(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            // A client that does not read its replies must not hold the session forever.
            let ms = self.shared.options.read_timeout_ms;
            tokio::time::timeout(Duration::from_millis(ms), self.w.write_all(&self.out))
                .await
                .map_err(|_| cut("a reply the client did not read", "read_timeout_ms", ms))??;
            self.out.clear();
        }
        Ok(())
    }

    /// Reads `n` bytes that follow the current line (a job body and its `\r\n`); `None` when
    /// the connection ends first. Bytes read past them stay for the next command.
    async fn read_exact_after_line(&mut self, n: usize) -> std::io::Result<Option<Vec<u8>>> {
        let mut data = self.lines.take(n);
        let mut buf = vec![0u8; READ_CHUNK];
        let ms = self.shared.options.read_timeout_ms;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        while data.len() < n {
            let got = tokio::select! {
                got = self.r.read(&mut buf) => got?,
                _ = self.close.wait_for(|c| *c) => return Ok(None),
                () = tokio::time::sleep_until(deadline) => {
                    return Err(cut("a job body", "read_timeout_ms", ms));
                }
            };
            if got == 0 {
                return Ok(None);
            }
            let want = (n - data.len()).min(got);
            data.extend_from_slice(&buf[..want]);
            self.lines.feed(&buf[want..got]);
        }
        Ok(Some(data))
    }

    fn count(&self, cmd: Cmd) {
        self.shared.counters.count(cmd);
    }

    fn now(&self) -> u64 {
        self.shared.queue.context().clock.now_ms()
    }

    async fn command(&mut self, line: &[u8]) -> std::io::Result<Flow> {
        let command = match Command::parse(line, self.shared.options.max_job_size) {
            Ok(c) => c,
            Err(ParseError::JobTooBig { skip }) => {
                // beanstalkd counts a put whose numbers it could read.
                self.count(Cmd::Put);
                // beanstalkd answers once the body has been skipped.
                if self.read_exact_after_line(skip as usize).await?.is_none() {
                    return Ok(Flow::Stop);
                }
                self.reply(Reply::JobTooBig);
                return Ok(Flow::Continue);
            }
            Err(e) => {
                if crate::proto::counts_as_put(line) {
                    self.count(Cmd::Put);
                }
                self.reply(e.into());
                return Ok(Flow::Continue);
            }
        };
        let reply = match command {
            Command::Put {
                pri,
                delay,
                ttr,
                bytes,
            } => {
                self.count(Cmd::Put);
                let n = bytes as usize;
                let Some(mut body) = self.read_exact_after_line(n + 2).await? else {
                    return Ok(Flow::Stop);
                };
                self.set_producer();
                // beanstalkd numbers the job before it reads the body, so a put refused for
                // its body or for drain mode still uses up an id; so does this one.
                let id = match self.shared.queue.next_job_id().await {
                    Ok(id) => id,
                    Err(e) => {
                        self.reply(put_error(&e));
                        return Ok(Flow::Continue);
                    }
                };
                if &body[n..] != b"\r\n" {
                    Reply::ExpectedCrlf
                } else if self.shared.draining.load(Ordering::Acquire) {
                    Reply::Draining
                } else {
                    body.truncate(n);
                    self.put(id, pri, delay, ttr, body).await
                }
            }
            Command::Use(tube) => {
                self.count(Cmd::Use);
                let tube = tube_name(tube);
                if tube != self.used {
                    self.shared.tubes.with(&tube, |t| t.using += 1);
                    let old = std::mem::replace(&mut self.used, tube);
                    self.shared.tubes.with(&old, |t| t.using -= 1);
                    self.free_if_unused(&old).await;
                }
                Reply::Using(self.used.clone().into_bytes())
            }
            Command::Reserve => {
                self.count(Cmd::Reserve);
                return self.reserve(None).await;
            }
            Command::ReserveWithTimeout(secs) => {
                self.count(Cmd::ReserveWithTimeout);
                // A negative timeout waits like `reserve` (beanstalkd 1.12).
                let timeout = u64::try_from(secs).ok().map(|s| s * 1_000);
                return self.reserve(timeout).await;
            }
            Command::ReserveJob(id) => self.reserve_job(id).await,
            Command::Delete(id) => {
                self.count(Cmd::Delete);
                self.delete(id).await
            }
            Command::Release { id, pri, delay } => {
                self.count(Cmd::Release);
                self.release(id, pri, delay).await
            }
            Command::Bury { id, pri } => {
                self.count(Cmd::Bury);
                self.bury(id, pri).await
            }
            Command::Touch(id) => {
                self.count(Cmd::Touch);
                self.touch(id).await
            }
            Command::Watch(tube) => {
                self.count(Cmd::Watch);
                let tube = tube_name(tube);
                if !self.watch.contains(&tube) {
                    self.shared.tubes.with(&tube, |t| t.watching += 1);
                    self.watch.push(tube);
                }
                Reply::Watching(self.watch.len())
            }
            Command::Ignore(tube) => {
                self.count(Cmd::Ignore);
                let tube = tube_name(tube);
                match self.watch.iter().position(|t| *t == tube) {
                    Some(_) if self.watch.len() < 2 => Reply::NotIgnored,
                    Some(i) => {
                        // beanstalkd's watch set moves its last tube into the hole.
                        self.watch.swap_remove(i);
                        self.shared.tubes.with(&tube, |t| t.watching -= 1);
                        self.free_if_unused(&tube).await;
                        Reply::Watching(self.watch.len())
                    }
                    None => Reply::Watching(self.watch.len()),
                }
            }
            Command::Peek(id) => {
                self.count(Cmd::Peek);
                match self.shared.jobs.find(&self.shared.queue, id).await {
                    Ok(Some((_, info))) => Reply::Found(id, info.body),
                    Ok(None) => Reply::NotFound,
                    Err(e) => internal("peek", &e),
                }
            }
            Command::PeekReady => {
                self.count(Cmd::PeekReady);
                self.peek_state(State::Ready).await
            }
            Command::PeekDelayed => {
                self.count(Cmd::PeekDelayed);
                self.peek_state(State::Delayed).await
            }
            Command::PeekBuried => {
                self.count(Cmd::PeekBuried);
                self.peek_state(State::Dead).await
            }
            Command::Kick(bound) => {
                self.count(Cmd::Kick);
                self.kick(bound).await
            }
            Command::KickJob(id) => {
                self.count(Cmd::Kick);
                self.kick_job(id).await
            }
            Command::StatsJob(id) => {
                self.count(Cmd::StatsJob);
                self.stats_job(id).await
            }
            Command::StatsTube(tube) => {
                self.count(Cmd::StatsTube);
                self.stats_tube(&tube_name(tube)).await
            }
            Command::Stats => {
                self.count(Cmd::Stats);
                self.stats().await
            }
            Command::ListTubes => {
                self.count(Cmd::ListTubes);
                match self.tubes().await {
                    Ok(tubes) => Reply::Ok(tube_list(tubes.iter().map(|t| t.name.as_bytes()))),
                    Err(e) => internal("list-tubes", &e),
                }
            }
            Command::ListTubeUsed => {
                self.count(Cmd::ListTubeUsed);
                Reply::Using(self.used.clone().into_bytes())
            }
            Command::ListTubesWatched => {
                self.count(Cmd::ListTubesWatched);
                Reply::Ok(tube_list(self.watch.iter().map(|t| t.as_bytes())))
            }
            Command::PauseTube { tube, delay } => {
                self.count(Cmd::PauseTube);
                self.pause_tube(&tube_name(tube), delay).await
            }
            Command::Quit => return Ok(Flow::Stop),
        };
        self.reply(reply);
        Ok(Flow::Continue)
    }

    fn set_producer(&mut self) {
        if !std::mem::replace(&mut self.producer, true) {
            let c = &self.shared.counters;
            c.current_producers.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn set_worker(&mut self) {
        if !std::mem::replace(&mut self.worker, true) {
            let c = &self.shared.counters;
            c.current_workers.fetch_add(1, Ordering::Relaxed);
        }
    }

    async fn put(&mut self, first_id: u64, pri: u32, delay: u32, ttr: u32, body: Vec<u8>) -> Reply {
        let queue = &self.shared.queue;
        let limits = &queue.context().limits;
        // beanstalkd raises a ttr under a second to one; delayq's limits cap both durations
        // (docs/beanstalk.md lists the caps).
        let ttr_ms =
            (u64::from(ttr.max(crate::proto::MIN_TTR_SECONDS)) * 1_000).min(limits.max_ttr_ms);
        let delay_ms = (u64::from(delay) * 1_000).min(limits.max_delay_ms);
        // A number that an HTTP producer already took as an id is skipped; a few tries are
        // plenty, since the counter never repeats.
        let mut id = first_id;
        for _ in 0..8 {
            let task = NewTask::new(self.used.clone(), super::format_job_id(id))
                .body(body.clone())
                .priority(pri)
                .delay_ms(delay_ms)
                .ttr_ms(ttr_ms)
                // beanstalkd never gives up on a job: it is released or times out for ever.
                .max_retries(MaxRetries::Unlimited);
            match queue.add(task).await {
                Ok(_) => {
                    self.shared.jobs.note(id, &self.used);
                    self.shared.jobs.note_delay(id, u64::from(delay));
                    self.shared.tubes.with(&self.used, |t| t.total_jobs += 1);
                    let c = &self.shared.counters;
                    c.total_jobs.fetch_add(1, Ordering::Relaxed);
                    return Reply::Inserted(id);
                }
                Err(e) if e.kind() == ErrorKind::Duplicate => {
                    id = match queue.next_job_id().await {
                        Ok(id) => id,
                        Err(e) => return put_error(&e),
                    };
                }
                Err(e) => return put_error(&e),
            }
        }
        Reply::InternalError
    }

    /// Drops held jobs whose ttr has ended: the queue has handed them out again (beanstalkd
    /// moves them back to ready at that moment).
    fn prune_held(&mut self, now: u64) {
        self.held.retain(|_, h| h.deadline_ms > now);
    }

    /// The end of the soonest held ttr.
    fn soonest_deadline(&self) -> Option<u64> {
        self.held.values().map(|h| h.deadline_ms).min()
    }

    async fn reserve(&mut self, timeout_ms: Option<u64>) -> std::io::Result<Flow> {
        self.set_worker();
        let queue = self.shared.queue.clone();
        let topics = self.shared.reservable(&self.watch);
        let start = self.now();
        self.prune_held(start);
        // A ready job is handed out even inside the safety margin (beanstalkd's conn_ready).
        let first = match topics.is_empty() {
            true => Ok(Vec::new()),
            false => queue.pop_any(&topics, PopOptions::default()).await,
        };
        match first {
            Ok(mut got) if !got.is_empty() => {
                let reply = self.reserved(got.remove(0)).await;
                self.reply(reply);
                return Ok(Flow::Continue);
            }
            Ok(_) => {}
            Err(e) => {
                self.reply(internal("reserve", &e));
                return Ok(Flow::Continue);
            }
        }
        if self
            .soonest_deadline()
            .is_some_and(|d| start + SAFETY_MARGIN_MS >= d)
        {
            self.reply(Reply::DeadlineSoon);
            return Ok(Flow::Continue);
        }
        if timeout_ms == Some(0) {
            self.reply(Reply::TimedOut);
            return Ok(Flow::Continue);
        }
        // The client waits: send what earlier commands answered first.
        self.flush().await?;
        self.waiting(1);
        let flow = self
            .wait_for_job(&topics, timeout_ms.map(|t| start + t))
            .await;
        self.waiting(-1);
        flow
    }

    fn waiting(&self, delta: i64) {
        let c = &self.shared.counters;
        if delta > 0 {
            c.current_waiting.fetch_add(1, Ordering::Relaxed);
        } else {
            c.current_waiting.fetch_sub(1, Ordering::Relaxed);
        }
        for tube in &self.watch {
            self.shared.tubes.with(tube, |t| {
                t.waiting = t.waiting.saturating_add_signed(delta);
            });
        }
    }

    async fn wait_for_job(
        &mut self,
        topics: &[String],
        until: Option<u64>,
    ) -> std::io::Result<Flow> {
        let queue = self.shared.queue.clone();
        let max_step = queue.context().limits.max_pop_timeout_ms.max(1);
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let now = self.now();
            let soon = self
                .soonest_deadline()
                .map(|d| d.saturating_sub(SAFETY_MARGIN_MS));
            if soon.is_some_and(|s| now >= s) {
                self.reply(Reply::DeadlineSoon);
                return Ok(Flow::Continue);
            }
            if until.is_some_and(|u| now >= u) {
                self.reply(Reply::TimedOut);
                return Ok(Flow::Continue);
            }
            let step_end = [Some(now + max_step), soon, until]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + max_step);
            let step = step_end.saturating_sub(now).max(1);
            let pop = async {
                if topics.is_empty() {
                    // Every watched tube is delivered by delayq itself: wait like an empty one.
                    tokio::time::sleep(std::time::Duration::from_millis(step)).await;
                    return Ok(Vec::new());
                }
                queue
                    .pop_any(topics, PopOptions::default().timeout_ms(step))
                    .await
            };
            tokio::pin!(pop);
            let got = loop {
                tokio::select! {
                    got = &mut pop => break got,
                    // Keep reading: a client that goes away ends the wait at once; commands it
                    // sends meanwhile wait their turn, as in beanstalkd.
                    n = self.r.read(&mut buf) => match n {
                        Ok(0) | Err(_) => return Ok(Flow::Stop),
                        Ok(n) => self.lines.feed(&buf[..n]),
                    },
                    _ = self.close.wait_for(|c| *c) => return Ok(Flow::Stop),
                }
            };
            match got {
                Ok(mut got) if !got.is_empty() => {
                    let reply = self.reserved(got.remove(0)).await;
                    self.reply(reply);
                    return Ok(Flow::Continue);
                }
                Ok(_) => {
                    // A pop over several topics may answer at once instead of waiting, on a
                    // backend without that long-poll: look again a little later, not in a
                    // tight loop.
                    if self.now() < step_end {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
                Err(e) if e.kind() == ErrorKind::ShuttingDown => return Ok(Flow::Stop),
                Err(e) => {
                    self.reply(internal("reserve", &e));
                    return Ok(Flow::Continue);
                }
            }
        }
    }

    /// Takes a delivery for this connection and answers `RESERVED`.
    async fn reserved(&mut self, d: Delivery) -> Reply {
        let queue = self.shared.queue.clone();
        let id = match self.shared.jobs.job_id(&queue, &d.topic, &d.id).await {
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
    async fn reserve_job(&mut self, id: u64) -> Reply {
        let queue = self.shared.queue.clone();
        let (r, _) = match self.shared.jobs.find(&queue, id).await {
            Ok(Some((r, info))) if info.state != State::Active => (r, info),
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

    /// The job `id` if this connection holds it and its ttr has not ended.
    fn take_held(&mut self, id: u64) -> Option<Held> {
        let now = self.now();
        self.prune_held(now);
        self.held.remove(&id)
    }

    async fn delete(&mut self, id: u64) -> Reply {
        let queue = self.shared.queue.clone();
        if let Some(h) = self.take_held(id) {
            match queue.finish(&h.topic, &h.task_id, Some(&h.receipt)).await {
                Ok(()) => return self.deleted(id, &h.topic),
                Err(e) if is_gone(&e) => {}
                Err(e) => return internal("delete", &e),
            }
        }
        match self.shared.jobs.find(&queue, id).await {
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
        self.shared.jobs.forget(id);
        self.shared.tubes.with(topic, |t| t.cmd_delete += 1);
        Reply::Deleted
    }

    async fn release(&mut self, id: u64, pri: u32, delay: u32) -> Reply {
        let Some(h) = self.take_held(id) else {
            return Reply::NotFound;
        };
        let queue = self.shared.queue.clone();
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
                self.shared.jobs.note_delay(id, u64::from(delay));
                Reply::Released
            }
            Err(e) if is_gone(&e) => Reply::NotFound,
            Err(e) => internal("release", &e),
        }
    }

    async fn bury(&mut self, id: u64, pri: u32) -> Reply {
        let Some(h) = self.take_held(id) else {
            return Reply::NotFound;
        };
        let options = BuryOptions::default()
            .receipt(h.receipt.clone())
            .priority(pri);
        match self.shared.queue.bury(&h.topic, &h.task_id, options).await {
            Ok(()) => Reply::Buried,
            Err(e) if is_gone(&e) => Reply::NotFound,
            Err(e) => internal("bury", &e),
        }
    }

    async fn touch(&mut self, id: u64) -> Reply {
        let Some(h) = self.take_held(id) else {
            return Reply::NotFound;
        };
        let queue = self.shared.queue.clone();
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

    async fn peek_state(&mut self, state: State) -> Reply {
        let queue = self.shared.queue.clone();
        match queue.peek(&self.used, state).await {
            Ok(Some(info)) => match self.shared.jobs.job_id(&queue, &info.topic, &info.id).await {
                Ok(id) => Reply::Found(id, info.body),
                Err(e) => internal("peek", &e),
            },
            Ok(None) => Reply::NotFound,
            Err(e) => internal("peek", &e),
        }
    }

    /// `kick n`; the kicked jobs' `kicks` of `stats-job` are counted by looking at the
    /// candidates (the first page of buried, else delayed, jobs) before and after.
    async fn kick(&mut self, bound: u32) -> Reply {
        let queue = self.shared.queue.clone();
        let candidates = match kick_candidates(&queue, &self.used).await {
            Ok(c) => c,
            Err(e) => return internal("kick", &e),
        };
        let n = match queue.kick(&self.used, u64::from(bound)).await {
            Ok(n) => n,
            Err(e) => return internal("kick", &e),
        };
        let mut counted = 0;
        for task_id in candidates {
            if counted == n {
                break;
            }
            if let Ok(info) = queue.get(&self.used, &task_id).await
                && info.state == State::Ready
                && let Ok(id) = self.shared.jobs.job_id(&queue, &self.used, &task_id).await
            {
                self.shared.jobs.count_kick(id);
                counted += 1;
            }
        }
        Reply::KickedCount(n as u32)
    }

    async fn kick_job(&mut self, id: u64) -> Reply {
        let queue = self.shared.queue.clone();
        match self.shared.jobs.find(&queue, id).await {
            Ok(Some((r, info))) if matches!(info.state, State::Dead | State::Delayed) => {
                match queue.kick_job(&r.topic, &r.task_id).await {
                    Ok(()) => {
                        self.shared.jobs.count_kick(id);
                        Reply::Kicked
                    }
                    Err(e) if is_gone(&e) => Reply::NotFound,
                    Err(e) => internal("kick-job", &e),
                }
            }
            Ok(_) => Reply::NotFound,
            Err(e) => internal("kick-job", &e),
        }
    }

    async fn stats_job(&mut self, id: u64) -> Reply {
        let queue = self.shared.queue.clone();
        let (r, info) = match self.shared.jobs.find(&queue, id).await {
            Ok(Some(found)) => found,
            Ok(None) => return Reply::NotFound,
            Err(e) => return internal("stats-job", &e),
        };
        let now = self.now() as i64;
        let secs = |ms: i64| ms.div_euclid(1_000);
        let state = match info.state {
            State::Ready => JobState::Ready,
            State::Active => JobState::Reserved,
            State::Delayed => JobState::Delayed,
            _ => JobState::Buried,
        };
        let time_left = match info.state {
            State::Active => info.deadline_ms.map_or(0, |d| secs(d as i64 - now)),
            State::Delayed => secs(info.due_ms as i64 - now),
            _ => 0,
        };
        let outcomes =
            |name: &str| info.history.iter().filter(|a| a.outcome == name).count() as u64;
        let stats = JobStats {
            id,
            tube: r.topic,
            state,
            pri: info.priority,
            age: secs(now - info.created_at_ms as i64).max(0),
            delay: match self.shared.jobs.delay(id) {
                Some(d) => d as i64,
                None => secs(info.delay_ms as i64),
            },
            ttr: secs(info.ttr_ms as i64),
            time_left,
            file: 0,
            reserves: info.history.len() as u64 + u64::from(info.state == State::Active),
            timeouts: outcomes("ttr_expired"),
            releases: outcomes("released"),
            buries: outcomes("buried"),
            kicks: self.shared.jobs.kicks(id),
        };
        Reply::Ok(stats.to_yaml())
    }

    async fn stats_tube(&mut self, name: &str) -> Reply {
        let queue = self.shared.queue.clone();
        let stats = match queue.stats(name).await {
            Ok(s) => s,
            Err(e) => return internal("stats-tube", &e),
        };
        if !has_jobs(&stats) && !self.shared.tubes.is_referenced(name) {
            return Reply::NotFound;
        }
        let tube = self.shared.tubes.get(name).unwrap_or_default();
        let urgent = match urgent(&queue, name, stats.ready).await {
            Ok(n) => n,
            Err(e) => return internal("stats-tube", &e),
        };
        let now = self.now();
        let pause = stats.pause.at(now);
        let doc = TubeStats {
            name: name.to_owned(),
            current_jobs_urgent: urgent,
            current_jobs_ready: stats.ready,
            current_jobs_reserved: stats.active,
            current_jobs_delayed: stats.delayed,
            current_jobs_buried: stats.dead,
            total_jobs: tube.total_jobs,
            current_using: tube.using,
            current_watching: tube.watching,
            current_waiting: tube.waiting,
            cmd_delete: tube.cmd_delete,
            cmd_pause_tube: tube.cmd_pause_tube,
            pause: if pause.paused { tube.pause_secs } else { 0 },
            pause_time_left: match (pause.paused, pause.until_ms) {
                (true, Some(until)) => (until.saturating_sub(now) / 1_000) as i64,
                _ => 0,
            },
        };
        Reply::Ok(doc.to_yaml())
    }

    /// The tubes in beanstalkd's list order (see `tubes.rs`).
    async fn tubes(&self) -> delayq::Result<Vec<super::tubes::Tube>> {
        let topics = self.shared.queue.topics().await?;
        let with_jobs: Vec<String> = topics
            .into_iter()
            .filter(|(_, s)| has_jobs(s))
            .map(|(name, _)| name)
            .collect();
        Ok(self.shared.tubes.reconcile(&with_jobs))
    }

    async fn stats(&mut self) -> Reply {
        let queue = self.shared.queue.clone();
        let topics = match queue.topics().await {
            Ok(t) => t,
            Err(e) => return internal("stats", &e),
        };
        let mut total = TopicStats::default();
        let mut urgent_jobs = 0;
        for (name, s) in &topics {
            total.merge(s);
            match urgent(&queue, name, s.ready).await {
                Ok(n) => urgent_jobs += n,
                Err(e) => return internal("stats", &e),
            }
        }
        let current_tubes = match self.tubes().await {
            Ok(t) => t.len() as u64,
            Err(e) => return internal("stats", &e),
        };
        let c = &self.shared.counters;
        let metrics = queue.context().metrics.snapshot();
        let (utime, stime) = rusage();
        let doc = ServerStats {
            current_jobs_urgent: urgent_jobs,
            current_jobs_ready: total.ready,
            current_jobs_reserved: total.active,
            current_jobs_delayed: total.delayed,
            current_jobs_buried: total.dead,
            cmd: c.commands(),
            job_timeouts: metrics.ttr_expired,
            total_jobs: c.total_jobs.load(Ordering::Relaxed),
            max_job_size: u64::from(self.shared.options.max_job_size),
            current_tubes,
            current_connections: c.current_connections.load(Ordering::Relaxed),
            current_producers: c.current_producers.load(Ordering::Relaxed),
            current_workers: c.current_workers.load(Ordering::Relaxed),
            current_waiting: c.current_waiting.load(Ordering::Relaxed),
            total_connections: c.total_connections.load(Ordering::Relaxed),
            pid: u64::from(std::process::id()),
            // The protocol version spoken: clients gate commands on it (fivebeans checks
            // `>= 1.8` before kick-job), so it must read like beanstalkd's.
            version: crate::PROTOCOL_VERSION.to_owned(),
            rusage_utime: utime,
            rusage_stime: stime,
            uptime: self.shared.started.elapsed().as_secs(),
            binlog_oldest_index: 0,
            binlog_current_index: 0,
            binlog_records_migrated: 0,
            binlog_records_written: 0,
            binlog_max_size: 10_485_760,
            draining: self.shared.draining.load(Ordering::Acquire),
            id: self.shared.instance.clone(),
            hostname: hostname(),
            os: os_release(),
            platform: std::env::consts::ARCH.to_owned(),
        };
        Reply::Ok(doc.to_yaml())
    }

    async fn pause_tube(&mut self, name: &str, delay: u32) -> Reply {
        let queue = self.shared.queue.clone();
        let exists = match queue.stats(name).await {
            Ok(s) => has_jobs(&s) || self.shared.tubes.is_referenced(name),
            Err(e) => return internal("pause-tube", &e),
        };
        if !exists {
            return Reply::NotFound;
        }
        // beanstalkd pauses for at least a moment even for 0, so that waiting clients wake.
        let for_ms = (u64::from(delay) * 1_000).clamp(1, queue.context().limits.max_delay_ms);
        match queue.pause(name, Some(for_ms)).await {
            Ok(()) => {
                self.shared.tubes.with(name, |t| {
                    t.cmd_pause_tube += 1;
                    t.pause_secs = u64::from(delay);
                });
                Reply::Paused
            }
            Err(e) => internal("pause-tube", &e),
        }
    }

    /// Frees the tube `name` in the registry if nothing refers to it any more.
    async fn free_if_unused(&self, name: &str) {
        if self.shared.tubes.is_referenced(name) {
            return;
        }
        let has = match self.shared.queue.stats(name).await {
            Ok(s) => has_jobs(&s),
            // Unknown: keep it; the next list reconciles.
            Err(_) => true,
        };
        self.shared.tubes.free_if_unused(name, has);
    }

    /// The connection is gone: give its jobs back and drop its references.
    async fn end(&mut self) {
        let queue = self.shared.queue.clone();
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
        let c = &self.shared.counters;
        c.current_connections.fetch_sub(1, Ordering::Relaxed);
        if self.producer {
            c.current_producers.fetch_sub(1, Ordering::Relaxed);
        }
        if self.worker {
            c.current_workers.fetch_sub(1, Ordering::Relaxed);
        }
        let used = std::mem::take(&mut self.used);
        self.shared.tubes.with(&used, |t| t.using -= 1);
        self.free_if_unused(&used).await;
        for tube in std::mem::take(&mut self.watch) {
            self.shared.tubes.with(&tube, |t| t.watching -= 1);
            self.free_if_unused(&tube).await;
        }
        let ms = self.shared.options.read_timeout_ms;
        let _ = tokio::time::timeout(Duration::from_millis(ms), self.w.shutdown()).await;
    }
}

fn tube_name(tube: Vec<u8>) -> String {
    // The parser accepted only ASCII name bytes.
    String::from_utf8(tube).unwrap_or_default()
}

fn has_jobs(s: &TopicStats) -> bool {
    s.delayed + s.ready + s.active + s.dead > 0
}

/// Whether an error says the job is not there for this command (unknown, in another state,
/// or held under another receipt).
fn is_gone(e: &delayq::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict)
}

fn put_error(e: &delayq::Error) -> Reply {
    if e.kind() == ErrorKind::ShuttingDown {
        Reply::Draining
    } else {
        internal("put", e)
    }
}

fn internal(op: &str, e: &delayq::Error) -> Reply {
    if e.kind() == ErrorKind::ShuttingDown {
        return Reply::Draining;
    }
    tracing::warn!(op, error = %e, "beanstalk command failed");
    Reply::InternalError
}

/// The ids a `kick` may move: the buried tasks of `topic`, or if it has none its delayed
/// ones (one page).
async fn kick_candidates(queue: &delayq::Queue, topic: &str) -> delayq::Result<Vec<String>> {
    let page_size = queue.context().limits.max_page_size;
    for state in [State::Dead, State::Delayed] {
        let page = queue.list(topic, Some(state), 1, page_size).await?;
        if !page.items.is_empty() {
            return Ok(page.items.into_iter().map(|t| t.id).collect());
        }
    }
    Ok(Vec::new())
}

/// READY jobs of `topic` with a priority under 1024 (beanstalkd's "urgent"), counted from the
/// records: `stats` and `stats-tube` are rare, the storage keeps no such counter.
async fn urgent(queue: &delayq::Queue, topic: &str, ready: u64) -> delayq::Result<u64> {
    if ready == 0 {
        return Ok(0);
    }
    let page_size = queue.context().limits.max_page_size;
    let mut count = 0;
    let mut page = 1;
    loop {
        let got = queue
            .list(topic, Some(State::Ready), page, page_size)
            .await?;
        count += got.items.iter().filter(|t| t.priority < 1024).count() as u64;
        if (got.items.len() as u64) < page_size || page * page_size >= got.total {
            return Ok(count);
        }
        page += 1;
    }
}

/// This process's CPU time in user and kernel mode, from `/proc/self/stat` (in clock ticks
/// of 1/100 s, Linux's USER_HZ); zero where that file does not exist.
fn rusage() -> (std::time::Duration, std::time::Duration) {
    let zero = std::time::Duration::ZERO;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (zero, zero);
    };
    // The command name may hold spaces: count fields after its closing parenthesis.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return (zero, zero);
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map_or(zero, |t| std::time::Duration::from_millis(t * 10))
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11), ticks(12))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// The kernel's version string, as beanstalkd's `os` (uname's `version`) shows it.
fn os_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/version")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| std::env::consts::OS.into())
}
