//! What every connection of one listener shares: the queue, and what beanstalkd keeps beside
//! its jobs (tubes, job-id aliases, the counters of `stats`).
//!
//! delayq's storage keeps the jobs; the rest lives here in process memory, as beanstalkd keeps
//! it. Commands are counted in one place, [`ServerState::parse_line`], from the command line
//! itself: beanstalkd counts a command once its line is read, so a `put` whose body never
//! comes is counted too.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use delayq::Queue;

use super::{BeanstalkOptions, jobs, tubes};
use crate::proto::stats::CommandCounts;
use crate::proto::{Command, ParseError, counts_as_put};

/// Command counters and connection counts of `stats`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub cmd: [AtomicU64; CMD_COUNT],
    pub total_jobs: AtomicU64,
    pub total_connections: AtomicU64,
    /// Connections closed at once because `max_connections` were open.
    pub refused_connections: AtomicU64,
    pub current_connections: AtomicU64,
    pub current_producers: AtomicU64,
    pub current_workers: AtomicU64,
    pub current_waiting: AtomicU64,
}

/// The commands `stats` counts, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Cmd {
    Put,
    Peek,
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Reserve,
    ReserveWithTimeout,
    Delete,
    Release,
    Use,
    Watch,
    Ignore,
    Bury,
    Kick,
    Touch,
    Stats,
    StatsJob,
    StatsTube,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube,
}

const CMD_COUNT: usize = 22;

impl Cmd {
    /// The counter a command line goes to (`parsed` is what [`Command::parse`] made of
    /// `line`), or `None` for the commands beanstalkd 1.12 does not count (`reserve-job`,
    /// `quit`) and lines that are no command.
    pub fn of(parsed: &Result<Command, ParseError>, line: &[u8]) -> Option<Cmd> {
        let command = match parsed {
            Ok(command) => command,
            // beanstalkd counts a put whose numbers it could read, refused or not.
            Err(ParseError::JobTooBig { .. }) => return Some(Cmd::Put),
            Err(_) => return counts_as_put(line).then_some(Cmd::Put),
        };
        Some(match command {
            Command::Put { .. } => Cmd::Put,
            Command::Use(_) => Cmd::Use,
            Command::Reserve => Cmd::Reserve,
            Command::ReserveWithTimeout(_) => Cmd::ReserveWithTimeout,
            Command::ReserveJob(_) | Command::Quit => return None,
            Command::Delete(_) => Cmd::Delete,
            Command::Release { .. } => Cmd::Release,
            Command::Bury { .. } => Cmd::Bury,
            Command::Touch(_) => Cmd::Touch,
            Command::Watch(_) => Cmd::Watch,
            Command::Ignore(_) => Cmd::Ignore,
            Command::Peek(_) => Cmd::Peek,
            Command::PeekReady => Cmd::PeekReady,
            Command::PeekDelayed => Cmd::PeekDelayed,
            Command::PeekBuried => Cmd::PeekBuried,
            // beanstalkd counts kick-job as a kick.
            Command::Kick(_) | Command::KickJob(_) => Cmd::Kick,
            Command::StatsJob(_) => Cmd::StatsJob,
            Command::StatsTube(_) => Cmd::StatsTube,
            Command::Stats => Cmd::Stats,
            Command::ListTubes => Cmd::ListTubes,
            Command::ListTubeUsed => Cmd::ListTubeUsed,
            Command::ListTubesWatched => Cmd::ListTubesWatched,
            Command::PauseTube { .. } => Cmd::PauseTube,
        })
    }
}

impl Counters {
    /// Counts one command of kind `cmd`.
    pub fn count(&self, cmd: Cmd) {
        self.cmd[cmd as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The command counters as `stats` shows them.
    pub fn commands(&self) -> CommandCounts {
        let c = |cmd: Cmd| self.cmd[cmd as usize].load(Ordering::Relaxed);
        CommandCounts {
            put: c(Cmd::Put),
            peek: c(Cmd::Peek),
            peek_ready: c(Cmd::PeekReady),
            peek_delayed: c(Cmd::PeekDelayed),
            peek_buried: c(Cmd::PeekBuried),
            reserve: c(Cmd::Reserve),
            reserve_with_timeout: c(Cmd::ReserveWithTimeout),
            delete: c(Cmd::Delete),
            release: c(Cmd::Release),
            use_: c(Cmd::Use),
            watch: c(Cmd::Watch),
            ignore: c(Cmd::Ignore),
            bury: c(Cmd::Bury),
            kick: c(Cmd::Kick),
            touch: c(Cmd::Touch),
            stats: c(Cmd::Stats),
            stats_job: c(Cmd::StatsJob),
            stats_tube: c(Cmd::StatsTube),
            list_tubes: c(Cmd::ListTubes),
            list_tube_used: c(Cmd::ListTubeUsed),
            list_tubes_watched: c(Cmd::ListTubesWatched),
            pause_tube: c(Cmd::PauseTube),
        }
    }
}

/// Whether `reserve` must skip a tube (see [`super::BeanstalkServer::skip_tubes`]).
pub type SkipTube = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// The queue and beanstalkd's server-wide state, shared by every connection of one listener.
pub(crate) struct ServerState {
    pub queue: Queue,
    pub options: BeanstalkOptions,
    pub draining: Arc<AtomicBool>,
    pub counters: Counters,
    pub tubes: tubes::Tubes,
    pub jobs: jobs::Jobs,
    pub started: Instant,
    /// A random id of this instance, as `stats` shows it.
    pub instance: String,
    /// Tubes that `reserve` skips: those delayq delivers itself (push targets).
    pub skip: std::sync::OnceLock<SkipTube>,
}

impl ServerState {
    /// The state of a listener starting now over `queue`; `draining` is its drain switch.
    pub fn new(queue: Queue, options: BeanstalkOptions, draining: Arc<AtomicBool>) -> Self {
        ServerState {
            queue,
            options,
            draining,
            counters: Counters::default(),
            tubes: tubes::Tubes::new(),
            jobs: jobs::Jobs::default(),
            started: Instant::now(),
            instance: instance_id(),
            skip: std::sync::OnceLock::new(),
        }
    }

    /// Parses a command line and counts it in `stats`: the one place commands are counted.
    pub fn parse_line(&self, line: &[u8]) -> Result<Command, ParseError> {
        let parsed = Command::parse(line, self.options.max_job_size);
        if let Some(cmd) = Cmd::of(&parsed, line) {
            self.counters.count(cmd);
        }
        parsed
    }

    /// The watched tubes `reserve` may take from.
    pub fn reservable(&self, watch: &[String]) -> Vec<String> {
        match self.skip.get() {
            Some(skip) => watch.iter().filter(|t| !skip(t)).cloned().collect(),
            None => watch.to_vec(),
        }
    }

    /// Whether drain mode is on (`put` answers `DRAINING`).
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}

/// 16 hex digits that differ between processes and runs (beanstalkd's `id` is random too).
fn instance_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let x = delayq::core::hash::splitmix64(nanos ^ (u64::from(std::process::id()) << 40));
    format!("{x:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_line_is_counted_under_its_kind() {
        let table: &[(&str, Option<Cmd>)] = &[
            ("put 0 0 60 1", Some(Cmd::Put)),
            // Refused puts count once their numbers could be read.
            ("put 0 0 60 4294967295", Some(Cmd::Put)),
            ("put 0 0 60 1 trailing", Some(Cmd::Put)),
            ("put 0 0 x 1", None),
            ("reserve", Some(Cmd::Reserve)),
            ("reserve-with-timeout 1", Some(Cmd::ReserveWithTimeout)),
            ("reserve-job 1", None),
            ("kick 1", Some(Cmd::Kick)),
            ("kick-job 1", Some(Cmd::Kick)),
            ("peek-buried", Some(Cmd::PeekBuried)),
            ("stats-tube default", Some(Cmd::StatsTube)),
            ("pause-tube default 1", Some(Cmd::PauseTube)),
            ("use -bad", None),
            ("quit", None),
            ("bogus", None),
        ];
        for (line, want) in table {
            let parsed = Command::parse(line.as_bytes(), crate::proto::DEFAULT_MAX_JOB_SIZE);
            assert_eq!(Cmd::of(&parsed, line.as_bytes()), *want, "{line:?}");
        }
    }
}
