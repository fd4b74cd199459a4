//! The raw command line, as clap reads it.
//!
//! These structs only describe flags; nothing here checks that flags fit together beyond what
//! clap can express. [`crate::config`] turns them into validated plans (ripgrep's
//! `lowargs` → `hiargs` split), and everything downstream takes the validated form.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use delayq_client::{OnDuplicate, OnExpire, State};

use crate::bench::BenchArgs;
use crate::duration::{parse_duration, parse_instant};

/// Exit codes, shown at the end of `delayq --help`.
pub const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  the server refused the request (an API error), or a usage error (bad flags, unreadable file)
  2  cannot reach the server (connection refused, timeout)";

/// The URL of a `delayq serve` started with its default `--listen`; the default `--server`
/// of every client command (and of `delayq bench`, whose flags are declared there).
pub use delayq_bench::DEFAULT_SERVER;

/// delayq: a millisecond-precise delay queue. Run the server with `delayq serve`; the other
/// commands talk to a running server over HTTP.
#[derive(Debug, Parser)]
#[command(name = "delayq", version, after_help = EXIT_CODES, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the delayq server.
    Serve(Box<delayq_daemon::ServeArgs>),
    /// Add a task, or import tasks from a JSON-lines file (--file).
    Add(AddArgs),
    /// Take ready tasks of a topic (long-poll).
    Pop(PopArgs),
    /// Confirm a popped task: ACTIVE → FINISHED.
    Finish(AckArgs),
    /// Give a popped task back as failed; it is redelivered per its backoff, or goes DEAD.
    Release(ReleaseArgs),
    /// Restart the time to run of a popped task.
    Touch(AckArgs),
    /// Cancel a task: it is never delivered again.
    Cancel(TaskArgs),
    /// Show one task.
    Get(TaskArgs),
    /// List the tasks of a topic, by due time.
    Tasks(TasksArgs),
    /// Show the counters of a topic, or of every topic.
    Stats(StatsArgs),
    /// List the topics with their counters.
    Topics(TopicsArgs),
    /// Make DEAD tasks READY again (one by --id, or --all of a topic).
    Requeue(RequeueArgs),
    /// Remove a task's record, whatever its state.
    Delete(TaskArgs),
    /// Bury a popped task: ACTIVE → DEAD with the reason "buried"; a requeue brings it back.
    Bury(BuryArgs),
    /// Give a DELAYED or READY task a new due time (now when no time is given).
    Reschedule(RescheduleArgs),
    /// Pause a topic: it keeps its tasks and takes adds but hands nothing out.
    Pause(PauseArgs),
    /// End the pause of a topic.
    Resume(TopicArgs),
    /// Manage push targets: delayq POSTs a topic's tasks to a URL when they are due.
    #[command(subcommand)]
    Push(PushCommand),
    /// Manage a topic's flow limits: how many tasks ACTIVE at once, how fast, per key.
    #[command(subcommand)]
    Limits(LimitsCommand),
    /// Manage recurring schedules: each occurrence becomes a task `<name>@<due ms>`.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Measure a running server end to end (loopback only).
    Bench(BenchArgs),
    /// Run delayq with beanstalkd's command line (-l, -p, -b, -f, -F, -z, -V): a drop-in
    /// beanstalkd speaking its protocol.
    Beanstalkd(crate::beanstalkd::BeanstalkdArgs),
    /// Check or repair an embedded data directory (the server must not be running).
    #[command(subcommand)]
    Data(DataCommand),
}

/// `delayq push ...`: a topic's push target (docs/push.md).
#[derive(Debug, Subcommand)]
pub enum PushCommand {
    /// Set (or replace) the push target of a topic. From then on the server delivers the
    /// topic's tasks to the URL itself, and clients can no longer pop the topic.
    Set(PushSetArgs),
    /// Show the push target of a topic, or every target.
    Get(StatsArgs),
    /// Remove the push target of a topic; its tasks then wait for ordinary consumers.
    Delete(TopicArgs),
}

/// `delayq limits ...`: a topic's flow limits (docs/flow-control.md).
#[derive(Debug, Subcommand)]
pub enum LimitsCommand {
    /// Set (or replace) the limits of a topic; every consumer of every instance obeys them.
    Set(LimitsSetArgs),
    /// Show the limits of a topic, or of every topic that has some.
    Get(StatsArgs),
    /// Remove the limits of a topic.
    Delete(TopicArgs),
}

/// `delayq limits set`: at least one limit.
#[derive(Debug, Args)]
pub struct LimitsSetArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// At most this many of the topic's tasks ACTIVE at once.
    #[arg(long, value_name = "N")]
    pub max_active: Option<u32>,
    /// At most this many hand-outs a second on average.
    #[arg(long, value_name = "PER_S")]
    pub rate: Option<f64>,
    /// Hand-outs that may go at once after a quiet time (default: one second of --rate).
    #[arg(long, value_name = "N", requires = "rate")]
    pub burst: Option<u32>,
    /// At most this many ACTIVE tasks of one key (`delayq add --key`) at once.
    #[arg(long, value_name = "N")]
    pub max_active_per_key: Option<u32>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq push set`.
#[derive(Debug, Args)]
pub struct PushSetArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The http:// or https:// URL each task is POSTed to.
    #[arg(long)]
    pub url: String,
    /// How long one call may take (default: the task's time to run).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<u64>,
    /// Most calls to the URL at once (default 4).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// Most calls per second on average (default: no limit).
    #[arg(long, value_name = "PER_S")]
    pub rate: Option<f64>,
    /// Calls that may go at once after a quiet time (default: one second of --rate).
    #[arg(long, value_name = "N", requires = "rate")]
    pub burst: Option<u32>,
    /// An extra header, `Name: value`; repeat for several.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Sign every call with this key (`Delayq-Signature`).
    #[arg(long, env = "DELAYQ_PUSH_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq data ...`: offline tools for an embedded data directory.
#[derive(Debug, Clone, Subcommand)]
pub enum DataCommand {
    /// Read every log and snapshot and report damage (file and byte offset), changing nothing.
    Check(DataArgs),
    /// Cut every damaged log back to its valid prefix. The cut bytes are saved next to the
    /// log and later files are renamed to `*.discarded`, never deleted. Refuses to run
    /// without `--yes` unless `--dry-run` is given.
    Repair(RepairArgs),
}

/// The data directory to look at.
#[derive(Debug, Clone, Args)]
pub struct DataArgs {
    /// The data directory (as given to `delayq serve --data-dir`).
    #[arg(
        long,
        env = "DELAYQ_DATA_DIR",
        default_value = delayq_daemon::config::DEFAULT_DATA_DIR,
        value_name = "DIR"
    )]
    pub data_dir: std::path::PathBuf,
}

/// Arguments of `delayq data repair`.
#[derive(Debug, Clone, Args)]
pub struct RepairArgs {
    #[command(flatten)]
    /// The data directory.
    pub data: DataArgs,
    /// Only report what would be done.
    #[arg(long)]
    pub dry_run: bool,
    /// Confirm that records after the damage are discarded.
    #[arg(long)]
    pub yes: bool,
}

/// How to reach the server and how to print, shared by every client command.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection and output")]
pub struct ClientArgs {
    /// The server's base URL.
    #[arg(
        long,
        env = "DELAYQ_SERVER",
        default_value = DEFAULT_SERVER,
        value_name = "URL"
    )]
    pub server: String,
    /// A bearer token for a server that requires one.
    #[arg(
        long,
        env = "DELAYQ_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Print the server's `data` as one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `delayq add`.
#[derive(Debug, Args)]
#[command(after_help = "\
With --file, each line of the file is one JSON object, the /add body of one task \
({\"topic\",\"id\",\"body\",\"delay_ms\"|\"run_at_ms\",\"ttr_ms\",\"max_retries\",\"backoff\",\"on_duplicate\"}). \
Blank lines are skipped. --topic, --ttr, --max-retries, --backoff-schedule and --on-duplicate \
then fill in fields a line leaves out. Lines are sent in batches of --batch-size; each refused \
line is reported with its line number, and the command exits with 1 if any line was refused.")]
pub struct AddArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: Option<String>,
    /// The task's id, unique inside the topic.
    #[arg(long, short = 'i')]
    pub id: Option<String>,
    /// The payload, as text.
    #[arg(long, short = 'b', conflicts_with_all = ["body_file", "body_base64"])]
    pub body: Option<String>,
    /// Read the payload from a file, any bytes (`-` for standard input).
    #[arg(long, value_name = "PATH", conflicts_with = "body_base64")]
    pub body_file: Option<PathBuf>,
    /// The payload as standard base64, for bytes that are not text.
    #[arg(long, value_name = "BASE64")]
    pub body_base64: Option<String>,
    /// Lower is handed out first, 0 to 4294967295 (default 1024).
    #[arg(long, short = 'p', value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<u32>,
    /// Make the task due after this long: 500ms, 15m, 2h, 1d.
    #[arg(long, short = 'd', value_parser = parse_duration, value_name = "DURATION", group = "when")]
    pub delay: Option<u64>,
    /// Make the task due after this many milliseconds.
    #[arg(long, value_name = "MS", group = "when")]
    pub delay_ms: Option<u64>,
    /// Make the task due at this instant (RFC 3339: 2030-01-01T08:00:00Z).
    #[arg(long, value_parser = parse_instant, value_name = "TIME", group = "when")]
    pub at: Option<u64>,
    /// Time to run: how long a consumer may hold the task (default: the server's
    /// `--default-ttr-ms`).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttr: Option<u64>,
    /// Redeliveries allowed: 0 for one attempt only, -1 for no limit (default: the
    /// server's `--default-max-retries`).
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub max_retries: Option<i64>,
    /// Wait before each redelivery, in order; the last repeats: 2m,10m,1h.
    #[arg(long, value_parser = parse_duration, value_delimiter = ',', value_name = "DURATIONS")]
    pub backoff_schedule: Option<Vec<u64>>,
    /// What to do when the (topic, id) exists already.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub on_duplicate: Option<DuplicatePolicy>,
    /// Expire the task this long after it is added unless handed out before (after its
    /// delay): 30m, 1h, 1d.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", group = "expiry")]
    pub expires_in: Option<u64>,
    /// Expire the task at this instant unless handed out before (RFC 3339).
    #[arg(long, value_parser = parse_instant, value_name = "TIME", group = "expiry")]
    pub expires_at: Option<u64>,
    /// What an expiry does: the task goes DEAD with the last error "expired" (default), or
    /// is deleted.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub on_expire: Option<ExpirePolicy>,
    /// The flow-control key (a merchant, a user): the topic's max-active-per-key bounds the
    /// ACTIVE tasks of one key (docs/flow-control.md).
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Import tasks from a JSON-lines file (`-` for standard input) instead of adding one.
    #[arg(long, short = 'f', value_name = "PATH", conflicts_with_all = ["id", "body", "body_file", "delay", "delay_ms", "at"])]
    pub file: Option<PathBuf>,
    /// With --file: how many tasks to send per request (at most 10000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000), value_name = "N")]
    pub batch_size: u32,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// The duplicate policies, as flag values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DuplicatePolicy {
    /// Refuse the add (409).
    Reject,
    /// Replace body, due time and options.
    Replace,
    /// Keep the existing task and report that it existed.
    Keep,
}

impl From<DuplicatePolicy> for OnDuplicate {
    fn from(policy: DuplicatePolicy) -> Self {
        match policy {
            DuplicatePolicy::Reject => OnDuplicate::Reject,
            DuplicatePolicy::Replace => OnDuplicate::Replace,
            DuplicatePolicy::Keep => OnDuplicate::Keep,
        }
    }
}

/// The expiry policies, as flag values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExpirePolicy {
    /// DEAD with the last error "expired".
    Dead,
    /// Deleted.
    Drop,
}

impl From<ExpirePolicy> for OnExpire {
    fn from(policy: ExpirePolicy) -> Self {
        match policy {
            ExpirePolicy::Dead => OnExpire::Dead,
            ExpirePolicy::Drop => OnExpire::Drop,
        }
    }
}

/// `delayq pop`.
#[derive(Debug, Args)]
pub struct PopArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The most tasks to take.
    #[arg(long, short = 'n', default_value_t = 1, value_name = "N")]
    pub count: usize,
    /// How long to wait for a ready task (default: the server's
    /// `--default-pop-timeout-ms`, at most its `--max-pop-timeout-ms`).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<u64>,
    /// Finish the tasks as they are handed out (at-most-once).
    #[arg(long)]
    pub auto_finish: bool,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq finish` and `delayq touch`.
#[derive(Debug, Args)]
pub struct AckArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The task's id.
    #[arg(long, short = 'i')]
    pub id: String,
    /// The receipt of the attempt, as `pop` gave it; a stale one is refused.
    #[arg(long, short = 'r')]
    pub receipt: Option<String>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The task's id.
    #[arg(long, short = 'i')]
    pub id: String,
    /// The receipt of the attempt, as `pop` gave it.
    #[arg(long, short = 'r')]
    pub receipt: Option<String>,
    /// Wait this long before the task is ready again, instead of its backoff.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub delay: Option<u64>,
    /// Why the attempt failed; kept in the task's history.
    #[arg(long)]
    pub error: Option<String>,
    /// Give the task this priority from now on (lower first).
    #[arg(long, short = 'p', value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<u32>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq bury`.
#[derive(Debug, Args)]
pub struct BuryArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The task's id.
    #[arg(long, short = 'i')]
    pub id: String,
    /// The receipt of the attempt, as `pop` gave it; a stale one is refused.
    #[arg(long, short = 'r')]
    pub receipt: Option<String>,
    /// Why, kept as the task's last error (default "buried").
    #[arg(long)]
    pub error: Option<String>,
    /// Give the task this priority from now on (lower first).
    #[arg(long, short = 'p', value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<u32>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq reschedule`.
#[derive(Debug, Args)]
pub struct RescheduleArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The task's id.
    #[arg(long, short = 'i')]
    pub id: String,
    /// Make the task due this long from now: 500ms, 15m, 2h, 1d.
    #[arg(long, short = 'd', value_parser = parse_duration, value_name = "DURATION", group = "when")]
    pub delay: Option<u64>,
    /// Make the task due this many milliseconds from now.
    #[arg(long, value_name = "MS", group = "when")]
    pub delay_ms: Option<u64>,
    /// Make the task due at this instant (RFC 3339: 2030-01-01T08:00:00Z).
    #[arg(long, value_parser = parse_instant, value_name = "TIME", group = "when")]
    pub at: Option<u64>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// End the pause by itself after this long (default: until `delayq resume`).
    #[arg(long = "for", value_parser = parse_duration, value_name = "DURATION")]
    pub for_ms: Option<u64>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Commands that name one topic.
#[derive(Debug, Args)]
pub struct TopicArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Commands that name one task.
#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The task's id.
    #[arg(long, short = 'i')]
    pub id: String,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq tasks`.
#[derive(Debug, Args)]
pub struct TasksArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// Only tasks in this state (delayed, ready, active, finished, cancelled, dead, or 0-5).
    #[arg(long, short = 's', value_parser = parse_state, value_name = "STATE")]
    pub state: Option<State>,
    /// The page, from 1.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub page: u64,
    /// Tasks per page; the server clamps it to its `max_page_size` (1000 by default) and the
    /// footer says what it used.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub page_size: u64,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The topic; every topic when left out.
    #[arg(long, short = 't')]
    pub topic: Option<String>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq topics`.
#[derive(Debug, Args)]
pub struct TopicsArgs {
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq requeue`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["id", "all"]))]
pub struct RequeueArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The DEAD task to requeue.
    #[arg(long, short = 'i')]
    pub id: Option<String>,
    /// Requeue every DEAD task of the topic.
    #[arg(long)]
    pub all: bool,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Reads a state by name or code, for clap.
fn parse_state(text: &str) -> Result<State, String> {
    State::parse(text).ok_or_else(|| {
        format!("unknown state {text:?}; use delayed, ready, active, finished, cancelled or dead")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_default_server_is_where_serve_listens_by_default() {
        let listen = delayq_daemon::ServerConfig::default().listen;
        assert_eq!(DEFAULT_SERVER, format!("http://{listen}"));
    }

    #[test]
    fn add_flags_parse() {
        let cli = Cli::try_parse_from([
            "delayq",
            "add",
            "--topic",
            "orders",
            "--id",
            "o-1",
            "--delay",
            "15m",
            "--max-retries",
            "-1",
            "--backoff-schedule",
            "2m,10m,1h",
            "--on-duplicate",
            "keep",
        ])
        .unwrap();
        let Command::Add(add) = cli.command else {
            panic!("not add");
        };
        assert_eq!(add.delay, Some(900_000));
        assert_eq!(add.max_retries, Some(-1));
        assert_eq!(
            add.backoff_schedule,
            Some(vec![120_000, 600_000, 3_600_000])
        );
        assert_eq!(add.on_duplicate, Some(DuplicatePolicy::Keep));
        assert_eq!(add.client.server, "http://127.0.0.1:9280");
    }

    #[test]
    fn conflicting_flags_are_refused() {
        let table: [&[&str]; 7] = [
            &[
                "delayq",
                "add",
                "-t",
                "a",
                "-i",
                "b",
                "--delay",
                "1s",
                "--delay-ms",
                "5",
            ],
            &[
                "delayq",
                "add",
                "-t",
                "a",
                "-i",
                "b",
                "--body",
                "x",
                "--body-file",
                "f",
            ],
            &["delayq", "add", "--file", "f", "--id", "b"],
            &["delayq", "requeue", "-t", "a"],
            &[
                "delayq",
                "add",
                "-t",
                "a",
                "-i",
                "b",
                "--body",
                "x",
                "--body-base64",
                "AA==",
            ],
            &[
                "delayq",
                "reschedule",
                "-t",
                "a",
                "-i",
                "b",
                "--delay",
                "1s",
                "--at",
                "2030-01-01T00:00:00Z",
            ],
            &["delayq", "add", "-t", "a", "-i", "b", "--priority", "-1"],
        ];
        for argv in table {
            assert!(Cli::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }
}

/// `delayq schedule ...`: recurring schedules (docs/schedules.md).
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule, or replace the definition of the one with the same topic and name.
    Add(ScheduleAddArgs),
    /// List the schedules (of one topic) with their next occurrence.
    List(ScheduleListArgs),
    /// Show one schedule and its next occurrences.
    Get(ScheduleGetArgs),
    /// Delete a schedule; its pending occurrence is cancelled.
    Delete(ScheduleKeyArgs),
    /// Pause a schedule: its pending occurrence is cancelled and none is added until resumed.
    Pause(ScheduleKeyArgs),
    /// Resume a paused schedule with the first occurrence after now.
    Resume(ScheduleKeyArgs),
}

/// What to do with occurrences missed while no server ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MissedPolicy {
    /// One occurrence fires for all the missed ones (the default).
    FireOnce,
    /// Missed occurrences do not fire.
    Skip,
}

/// `delayq schedule add`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("recurrence").required(true).args(["cron", "every", "every_ms"]))]
pub struct ScheduleAddArgs {
    /// The topic its occurrences are added to.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The schedule's name, unique in the topic ([A-Za-z0-9._:+=-], no '@' or '/').
    #[arg(long, short = 'n')]
    pub name: String,
    /// A cron expression: 5 fields, 6 with seconds first, or @hourly, @daily, ...
    #[arg(long)]
    pub cron: Option<String>,
    /// A fixed interval instead of --cron: 1s, 15m, 1h, 1d.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub every: Option<u64>,
    /// A fixed interval in milliseconds instead of --cron.
    #[arg(long, value_name = "MS")]
    pub every_ms: Option<u64>,
    /// The IANA time zone of --cron (default UTC): Europe/Berlin, America/New_York.
    #[arg(long, value_name = "ZONE")]
    pub timezone: Option<String>,
    /// The body of every occurrence, as text.
    #[arg(long, short = 'b')]
    pub body: Option<String>,
    /// The priority of every occurrence (default 1024).
    #[arg(long, short = 'p', value_name = "N")]
    pub priority: Option<u32>,
    /// The time to run of every occurrence.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub ttr: Option<u64>,
    /// The redeliveries of every occurrence: 0 for one attempt, -1 for no limit.
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub max_retries: Option<i64>,
    /// No occurrence before this instant (RFC 3339); the anchor of --every.
    #[arg(long, value_parser = parse_instant, value_name = "TIME")]
    pub start: Option<u64>,
    /// No occurrence after this instant (RFC 3339).
    #[arg(long, value_parser = parse_instant, value_name = "TIME")]
    pub end: Option<u64>,
    /// Create it paused.
    #[arg(long)]
    pub paused: bool,
    /// What happens to occurrences missed while no server ran.
    #[arg(long, value_enum, value_name = "POLICY")]
    pub missed: Option<MissedPolicy>,
    /// How many upcoming occurrences to show after writing it.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub next: u64,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq schedule list`.
#[derive(Debug, Args)]
pub struct ScheduleListArgs {
    /// Only the schedules of this topic.
    #[arg(long, short = 't')]
    pub topic: Option<String>,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `delayq schedule get`.
#[derive(Debug, Args)]
pub struct ScheduleGetArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The schedule's name.
    #[arg(long, short = 'n')]
    pub name: String,
    /// How many upcoming occurrences to show (at most 1000).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub next: u64,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Schedule commands that name one schedule.
#[derive(Debug, Args)]
pub struct ScheduleKeyArgs {
    /// The topic.
    #[arg(long, short = 't')]
    pub topic: String,
    /// The schedule's name.
    #[arg(long, short = 'n')]
    pub name: String,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: ClientArgs,
}
