//! The documents of `stats`, `stats-tube` and `stats-job`, gathered from the queue, the
//! listener's counters and the operating system; [`crate::proto::stats`] writes them as
//! beanstalkd 1.12's YAML.
//!
//! The job counts come from the storage, so they include tasks added over HTTP; "urgent" jobs
//! (READY with a priority under 1024) are counted from the records, since the storage keeps
//! no such counter and these commands are rare. The process figures (`rusage-*`, `hostname`,
//! `os`) are read from Linux's `/proc`, with neutral values where it does not exist.

use std::sync::atomic::Ordering;
use std::time::Duration;

use delayq::{Queue, State, TaskInfo, TopicStats};

use super::session::{Session, has_jobs, internal};
use crate::proto::Reply;
use crate::proto::stats::{JobState, JobStats, ServerStats, TubeStats};

/// beanstalkd's "urgent": a priority under this.
const URGENT_BELOW: u32 = 1024;

/// beanstalkd's default `binlog-max-size`, shown although delayq keeps no binlog.
const BINLOG_MAX_SIZE: u64 = 10_485_760;

/// Job counts over every tube.
struct Totals {
    jobs: TopicStats,
    urgent: u64,
    tubes: u64,
}

impl Session {
    /// `stats`.
    pub(crate) async fn stats(&self) -> Reply {
        match self.totals().await {
            Ok(totals) => Reply::Ok(self.server_stats(totals).to_yaml()),
            Err(e) => internal("stats", &e),
        }
    }

    async fn totals(&self) -> delayq::Result<Totals> {
        let queue = &self.server.queue;
        let mut jobs = TopicStats::default();
        let mut urgent_jobs = 0;
        for (name, s) in &queue.topics().await? {
            jobs.merge(s);
            urgent_jobs += urgent(queue, name, s.ready).await?;
        }
        let tubes = self.tubes().await?.len() as u64;
        Ok(Totals {
            jobs,
            urgent: urgent_jobs,
            tubes,
        })
    }

    fn server_stats(&self, totals: Totals) -> ServerStats {
        let server = &self.server;
        let c = &server.counters;
        let metrics = server.queue.context().metrics.snapshot();
        let (utime, stime) = rusage();
        ServerStats {
            current_jobs_urgent: totals.urgent,
            current_jobs_ready: totals.jobs.ready,
            current_jobs_reserved: totals.jobs.active,
            current_jobs_delayed: totals.jobs.delayed,
            current_jobs_buried: totals.jobs.dead,
            cmd: c.commands(),
            job_timeouts: metrics.ttr_expired,
            total_jobs: c.total_jobs.load(Ordering::Relaxed),
            max_job_size: u64::from(server.options.max_job_size),
            current_tubes: totals.tubes,
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
            uptime: server.started.elapsed().as_secs(),
            binlog_oldest_index: 0,
            binlog_current_index: 0,
            binlog_records_migrated: 0,
            binlog_records_written: 0,
            binlog_max_size: BINLOG_MAX_SIZE,
            draining: server.is_draining(),
            id: server.instance.clone(),
            hostname: hostname(),
            os: os_release(),
            platform: std::env::consts::ARCH.to_owned(),
        }
    }

    /// `stats-tube <tube>`: `NOT_FOUND` for a tube without jobs that no connection uses or
    /// watches.
    pub(crate) async fn stats_tube(&self, name: &str) -> Reply {
        let queue = &self.server.queue;
        let stats = match queue.stats(name).await {
            Ok(s) => s,
            Err(e) => return internal("stats-tube", &e),
        };
        if !has_jobs(&stats) && !self.server.tubes.is_referenced(name) {
            return Reply::NotFound;
        }
        let tube = self.server.tubes.get(name).unwrap_or_default();
        let urgent = match urgent(queue, name, stats.ready).await {
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

    /// `stats-job <id>`.
    pub(crate) async fn stats_job(&self, id: u64) -> Reply {
        match self.server.jobs.find(&self.server.queue, id).await {
            Ok(Some((r, info))) => Reply::Ok(self.job_stats(id, r.topic, &info).to_yaml()),
            Ok(None) => Reply::NotFound,
            Err(e) => internal("stats-job", &e),
        }
    }

    /// The document of job `id`, task `info` of `tube`: its counts come from the attempt
    /// history, `kicks` and the last delay from this listener's memory.
    fn job_stats(&self, id: u64, tube: String, info: &TaskInfo) -> JobStats {
        let now = self.now() as i64;
        let secs = |ms: i64| ms.div_euclid(1_000);
        // A ttr or delay was counted from the clock's upper bound of now (so that it never
        // ends early); what is left of it is counted from the same bound. From the lower one,
        // a Redis-mode reading would show the width of the bounds as extra time: beanstalkd
        // clients check that `time-left` went down by the seconds they waited.
        let upper = self.server.queue.context().clock.upper_ms() as i64;
        let time_left = match info.state {
            State::Active => info.deadline_ms.map_or(0, |d| secs(d as i64 - upper)),
            State::Delayed => secs(info.due_ms as i64 - upper),
            _ => 0,
        };
        let outcomes =
            |name: &str| info.history.iter().filter(|a| a.outcome == name).count() as u64;
        let jobs = &self.server.jobs;
        JobStats {
            id,
            tube,
            state: job_state(info.state),
            pri: info.priority,
            age: secs(now - info.created_at_ms as i64).max(0),
            delay: match jobs.delay(id) {
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
            kicks: jobs.kicks(id),
        }
    }
}

/// The beanstalkd state of a live task.
fn job_state(state: State) -> JobState {
    match state {
        State::Ready => JobState::Ready,
        State::Active => JobState::Reserved,
        State::Delayed => JobState::Delayed,
        _ => JobState::Buried,
    }
}

/// READY jobs of `topic` with a priority under [`URGENT_BELOW`], counted from the records.
async fn urgent(queue: &Queue, topic: &str, ready: u64) -> delayq::Result<u64> {
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
        count += got
            .items
            .iter()
            .filter(|t| t.priority < URGENT_BELOW)
            .count() as u64;
        if (got.items.len() as u64) < page_size || page * page_size >= got.total {
            return Ok(count);
        }
        page += 1;
    }
}

/// This process's CPU time in user and kernel mode, from `/proc/self/stat` (in clock ticks
/// of 1/100 s, Linux's USER_HZ); zero where that file does not exist.
fn rusage() -> (Duration, Duration) {
    let zero = Duration::ZERO;
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
            .map_or(zero, |t| Duration::from_millis(t * 10))
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11), ticks(12))
}

/// The host's name, as beanstalkd's `hostname` shows it.
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
