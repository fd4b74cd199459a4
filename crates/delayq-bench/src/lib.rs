//! `delayq bench`: an end-to-end load generator against a running server, measured against
//! the ceiling of the server's own HTTP stack. The `delayq` binary parses the flags
//! ([`BenchArgs`]) and calls [`run`]; nothing here depends on the server's code, only on its
//! HTTP API (through `delayq-client` and a light client of its own) and, for `beanstalk`, on
//! the beanstalkd protocol. [`duration`] holds the durations as people write them, which the
//! binary's other commands share.
//!
//! Absolute rates on a shared machine move from run to run, so docs/design.md §6 states the HTTP
//! targets as ratios: each figure is compared with `GET /healthz` of the same server, from the
//! same clients, measured in the same run just before it ([`load::ceiling`]). The report gives
//! every figure with its ceiling and the ratio.
//!
//! - [`add`]: N clients add tasks (one per request, or `--batch` per request) for a fixed
//!   time; tasks/s against the ceiling.
//! - [`pop`]: the topic is pre-filled with ready tasks by batch adds, then N workers pop and
//!   finish them: one task a pop and one finish each (two requests a task, so against half the
//!   ceiling), and `pop count=N` with one batched finish; tasks/s against both.
//! - [`lateness`]: tasks due in the future are added at a steady rate; workers long-poll pop
//!   and compute lateness = the moment the task arrives at the worker − its `due_ms`. This
//!   includes the server's firing *and* the HTTP pop path and the client's own scheduling:
//!   DESIGN §6's end-to-end target (p99 ≤ 5 ms).
//! - [`push`]: push delivery to a receiver of the bench's own on loopback: deliveries/s and
//!   lateness at the receiver.
//! - [`beanstalk`]: put, then reserve + delete, over the beanstalkd protocol of any server
//!   that speaks it (`--server HOST:PORT`), to compare delayq with beanstalkd.
//! - [`dashboard`]: the web dashboard with 1 000 topics and 1M tasks: the first view and
//!   find by id, each against its target.
//! - [`memory`]: the server's resident memory (VmRSS, `--pid`) per delayed task beyond its
//!   body, read before and after adding N tasks.
//! - `ceiling`: only the `/healthz` ceiling, to compare the bench's client with `wrk`
//!   (`scripts/bench-http`).
//!
//! The load loops use a light client of their own ([`http`]): pre-serialized requests over one
//! keep-alive connection per client, `--threads` load threads each on a current-thread
//! runtime, so that the client takes little of the cores it shares with the server (on
//! `/healthz` within 10 % of `wrk -t1 -c50`, docs/design.md §6). Pre-filling and the lateness benchmark
//! use [`delayq_client::Client`]. Every loop is bounded both in time and in count and
//! stops by itself, and only loopback servers are accepted: this is a tool to measure one's
//! own machine, not to load someone else's.

pub mod add;
pub mod beanstalk;
pub mod dashboard;
pub mod duration;
mod error;
pub mod http;
pub mod lateness;
pub mod load;
pub mod memory;
pub mod pop;
pub mod push;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use clap::{Args, Subcommand};
use comfy_table::{Cell, CellAlignment, ContentArrangement, Table, presets};
use delayq_client::{Client, ClientOptions, Url};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::duration::{format_duration, parse_duration};
use http::Endpoint;

pub use error::BenchError;

/// The server `delayq` talks to when neither `--server` nor `DELAYQ_SERVER` says: the
/// default listen address of `delayq serve`.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:9280";

/// The longest any benchmark may run.
pub const MAX_DURATION_MS: u64 = 600_000;
/// The most concurrent clients or workers.
pub const MAX_CONCURRENCY: usize = 1_000;

/// A setting of benchmark `bench` is out of bounds unless `ok`; `what` names the flag and its
/// range.
fn require(bench: &str, ok: bool, what: &str) -> Result<(), BenchError> {
    if ok {
        Ok(())
    } else {
        Err(BenchError::usage(format!("bench {bench}: {what}")))
    }
}
/// Checks that `flag`'s `value` lies in `range`: the error names the flag and both bounds.
fn in_range<T>(
    bench: &str,
    flag: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), BenchError>
where
    T: PartialOrd + std::fmt::Display,
{
    let what = format!("{flag} must be {} to {}", range.start(), range.end());
    require(bench, range.contains(&value), &what)
}

/// Checks `--body-bytes`: at most 1 MiB, the server's own limit.
fn body_bytes(bench: &str, value: usize) -> Result<(), BenchError> {
    require(
        bench,
        value <= 1 << 20,
        "--body-bytes must be at most 1 MiB",
    )
}

/// The most tasks one benchmark may create.
pub const MAX_TASKS: u64 = 20_000_000;

/// `delayq bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which benchmark.
    #[command(subcommand)]
    pub which: Which,
    /// How to reach the server and how to print.
    #[command(flatten)]
    pub client: BenchConnection,
}

/// `--server`, `--token` and `--json` of `delayq bench`, accepted before or after the name of
/// the benchmark (`delayq bench add --server URL`).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection and output")]
pub struct BenchConnection {
    /// The server's base URL; it must be a loopback address.
    #[arg(
        long,
        global = true,
        env = "DELAYQ_SERVER",
        default_value = DEFAULT_SERVER,
        value_name = "URL"
    )]
    pub server: String,
    /// A bearer token for a server that requires one.
    #[arg(
        long,
        global = true,
        env = "DELAYQ_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// Print the report as one JSON document instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Load threads of the bench's own client, each running its share of the clients.
    #[arg(long, global = true, default_value_t = 1)]
    pub threads: usize,
    /// How long each `/healthz` ceiling is measured (at most the add benchmark's duration).
    #[arg(long, global = true, value_parser = parse_duration, default_value = "5s", value_name = "DURATION")]
    pub ceiling_time: u64,
}

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum Which {
    /// Adds per second from concurrent clients (target ≥ 90 % of the /healthz ceiling with 50
    /// clients, embedded).
    Add(add::AddBench),
    /// Pop + finish per second from concurrent workers, one task a pop and `pop count=N` with
    /// one batched finish (target ≥ 80 % of half the ceiling with 32 workers).
    Pop(pop::PopBench),
    /// Lateness of tasks due at a steady rate, as seen by popping workers (target p99 ≤ 2 ms
    /// at 10 000/s).
    Lateness(lateness::LatenessBench),
    /// Push delivery to a receiver of the bench's own on 127.0.0.1: deliveries/s and lateness
    /// (target ≥ 10 000/s, p99 ≤ 5 ms).
    Push(push::PushBench),
    /// Only the ceiling: `GET /healthz` from concurrent clients.
    Ceiling(CeilingBench),
    /// The web dashboard with many topics and tasks: first view (target ≤ 1 s) and find by
    /// id (target ≤ 50 ms) at 1 000 topics and 1M tasks.
    Dashboard(dashboard::DashboardBench),
    /// The server's resident memory per delayed task beyond its body (target ≤ 150 B at 1M
    /// and 10M): `--pid` of a server on this machine, whose VmRSS is read before and after.
    Memory(memory::MemoryBench),
    /// All of them, with their defaults (about a minute).
    All(AllBench),
    /// put, then reserve + delete, over the beanstalkd protocol (`--server HOST:PORT` of
    /// delayq's beanstalk listener or of beanstalkd itself).
    Beanstalk(beanstalk::BeanstalkBench),
}

/// `delayq bench ceiling`.
#[derive(Debug, Clone, Args)]
pub struct CeilingBench {
    /// Concurrent clients, each with its own keep-alive connection.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
}

/// `delayq bench all`.
#[derive(Debug, Clone, Args)]
pub struct AllBench {
    /// How long the add and lateness benchmarks run.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub duration: u64,
    /// How many tasks the pop benchmark pops and finishes.
    #[arg(long, default_value_t = 200_000)]
    pub tasks: u64,
}

/// A target of docs/design.md §6.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Target {
    /// What the figure is compared with: `>=` or `<=`.
    pub op: &'static str,
    /// The target value.
    pub value: f64,
    /// Its unit; a target in `%` judges the result's first ratio, not its figure.
    pub unit: &'static str,
    /// Under which condition docs/design.md §6 states it.
    pub condition: &'static str,
}

impl Target {
    /// Whether `value` (the figure, or the ratio for a target in `%`) meets the target.
    pub fn met_by(&self, value: f64) -> bool {
        match self.op {
            ">=" => value >= self.value,
            _ => value <= self.value,
        }
    }

    /// Whether the target is a ratio to a ceiling.
    pub fn is_ratio(&self) -> bool {
        self.unit.starts_with('%')
    }

    fn words(&self) -> String {
        format!(
            "{} {} {} ({})",
            if self.op == ">=" { "≥" } else { "≤" },
            group_digits(self.value),
            self.unit,
            self.condition
        )
    }
}

/// The ceiling a figure is compared with: `GET /healthz` of the same server from the same
/// clients, in the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Ceiling {
    /// How it was measured.
    pub measured: String,
    /// `/healthz` requests per second.
    pub requests_per_s: f64,
}

/// A figure as a share of (a part of) its ceiling.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// What it is compared with: `the ceiling`, or `half the ceiling` for two requests a task.
    pub against: &'static str,
    /// That ceiling in tasks per second.
    pub tasks_per_s: f64,
    /// The figure in percent of it.
    pub percent: f64,
}

impl Ratio {
    /// `figure` compared with `share` of `ceiling` requests per second.
    pub fn of(figure: f64, ceiling: f64, against: &'static str, share: f64) -> Ratio {
        let tasks_per_s = ceiling * share;
        let percent = if tasks_per_s > 0.0 {
            100.0 * figure / tasks_per_s
        } else {
            0.0
        };
        Ratio {
            against,
            tasks_per_s,
            percent,
        }
    }
}

/// The whole ceiling.
pub const FULL: (&str, f64) = ("the ceiling", 1.0);
/// Half the ceiling: the most tasks/s when each task takes two requests.
pub const HALF: (&str, f64) = ("half the ceiling", 0.5);

/// `61.04` → `61 %`, `4.56` → `4.6 %`.
pub fn percent(value: f64) -> String {
    if value < 10.0 {
        format!("{value:.1} %")
    } else {
        format!("{value:.0} %")
    }
}

/// Latency or lateness percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest value.
    pub max: f64,
    /// How many values.
    pub count: u64,
}

impl Percentiles {
    /// Reads percentiles from a histogram of microseconds.
    pub fn from_micros(h: &Histogram<u64>) -> Percentiles {
        let ms = |us: u64| us as f64 / 1_000.0;
        Percentiles {
            p50: ms(h.value_at_quantile(0.50)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
            count: h.len(),
        }
    }

    fn words(&self) -> String {
        if self.count == 0 {
            return "-".into();
        }
        format!(
            "p50 {:.2} / p99 {:.2} / p99.9 {:.2} / max {:.2} ms",
            self.p50, self.p99, self.p999, self.max
        )
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    /// The benchmark (`add`, `pop`, `lateness`, or a phase such as `pop (prefill)`).
    pub bench: String,
    /// What is measured, in words, with the settings used.
    pub measured: String,
    /// The figure compared with the target.
    pub figure: f64,
    /// The unit of the figure.
    pub unit: &'static str,
    /// The target of docs/design.md §6, if the line has one.
    pub target: Option<Target>,
    /// Whether the figure meets the target.
    pub met: Option<bool>,
    /// Request latency (add, pop) or lateness, in milliseconds.
    pub latency_ms: Option<Percentiles>,
    /// What the latency column measures.
    pub latency_of: &'static str,
    /// Operations completed.
    pub ops: u64,
    /// Requests refused or failed.
    pub errors: u64,
    /// The first error, if any.
    pub first_error: Option<String>,
    /// The `/healthz` ceiling the figure is compared with, if any.
    pub ceiling: Option<Ceiling>,
    /// The figure as a share of the ceiling (the first is the one the target judges).
    pub ratios: Vec<Ratio>,
    /// Anything else the reader must know to read the figure right.
    pub notes: Vec<String>,
    /// Whether the run's settings are the target's condition.
    #[serde(skip)]
    comparable: bool,
}

impl BenchResult {
    /// Keeps the target for reference but does not judge the figure against it, because the
    /// run's settings differ from the target's condition (`why`).
    pub fn not_comparable(&mut self, why: String) {
        if self.target.is_some() {
            self.met = None;
            self.comparable = false;
            self.notes.push(format!(
                "{why}, so the figure is not judged against the target"
            ));
        }
    }

    /// A result compared with `target`.
    pub fn new(
        bench: impl Into<String>,
        measured: impl Into<String>,
        figure: f64,
        unit: &'static str,
        target: Option<Target>,
    ) -> BenchResult {
        BenchResult {
            bench: bench.into(),
            measured: measured.into(),
            figure,
            unit,
            met: target.filter(|t| !t.is_ratio()).map(|t| t.met_by(figure)),
            target,
            latency_ms: None,
            latency_of: "",
            ops: 0,
            errors: 0,
            first_error: None,
            ceiling: None,
            ratios: Vec::new(),
            notes: Vec::new(),
            comparable: true,
        }
    }

    /// Compares the figure with `ceiling`, once per `(against, share)`; a target in `%` judges
    /// the first ratio.
    pub fn compare(&mut self, ceiling: &Ceiling, shares: &[(&'static str, f64)]) {
        self.ratios = shares
            .iter()
            .map(|&(against, share)| Ratio::of(self.figure, ceiling.requests_per_s, against, share))
            .collect();
        self.ceiling = Some(ceiling.clone());
        if let (Some(target), Some(ratio)) = (self.target, self.ratios.first())
            && target.is_ratio()
            && self.comparable
        {
            self.met = Some(target.met_by(ratio.percent));
        }
    }

    /// The figure in one sentence with its ceiling, ratios and target (`add: 28 400 tasks/s =
    /// 61 % of the /healthz ceiling 46 500 req/s; target ≥ 90 % of the ceiling (...)`).
    pub fn sentence(&self) -> String {
        let mut text = format!(
            "{}: {} {}",
            self.bench,
            group_digits(self.figure),
            self.unit
        );
        if let Some(ceiling) = &self.ceiling {
            let parts: Vec<String> = self
                .ratios
                .iter()
                .map(|r| {
                    if r.against == FULL.0 {
                        format!(
                            "{} of the /healthz ceiling {} req/s",
                            percent(r.percent),
                            group_digits(ceiling.requests_per_s)
                        )
                    } else {
                        format!(
                            "{} of {} ({} tasks/s)",
                            percent(r.percent),
                            r.against,
                            group_digits(r.tasks_per_s)
                        )
                    }
                })
                .collect();
            text.push_str(&format!(" = {}", parts.join(", ")));
        }
        if let Some(target) = &self.target {
            text.push_str(&format!("; target {}", target.words()));
            match self.met {
                Some(true) => text.push_str(", met"),
                Some(false) => text.push_str(", NOT met"),
                None => {}
            }
        }
        text
    }
}

/// What the benchmarks share: the clients, the run's settings and the ceilings measured so
/// far (one per number of clients).
pub struct Ctx {
    /// The general client, for pre-filling and the lateness benchmark.
    pub client: Client,
    /// Where the light client's requests go.
    pub endpoint: Endpoint,
    /// Load threads.
    pub threads: usize,
    /// How long a ceiling is measured, ms.
    pub ceiling_time: u64,
    /// The bearer token, for the clients of other instances (`--consumer-server`).
    pub token: Option<String>,
    ceilings: BTreeMap<usize, Ceiling>,
    /// The ceilings' own lines of the report.
    pub ceiling_lines: Vec<BenchResult>,
}

impl Ctx {
    /// The ceiling for `clients` clients, measured now (for at most `max_ms`) unless it was
    /// measured already in this run.
    pub async fn ceiling(&mut self, clients: usize, max_ms: u64) -> Result<Ceiling, BenchError> {
        if let Some(c) = self.ceilings.get(&clients) {
            return Ok(c.clone());
        }
        let ms = self.ceiling_time.min(max_ms).max(1);
        let (rate, run) = load::ceiling(
            &self.endpoint,
            self.threads,
            clients,
            Duration::from_millis(ms),
        )
        .await?;
        if run.requests == 0 {
            return Err(BenchError::Bench {
                bench: "ceiling",
                reason: format!(
                    "no GET /healthz succeeded: {}",
                    run.first_error.unwrap_or_else(|| "no answer".into())
                ),
            });
        }
        let measured = format!(
            "GET /healthz, {clients} clients, {} load thread{}, for {}",
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            format_duration(ms)
        );
        let ceiling = Ceiling {
            measured: measured.clone(),
            requests_per_s: rate,
        };
        let mut line = BenchResult::new("ceiling", measured, rate, "req/s", None);
        line.latency_ms = Some(Percentiles::from_micros(&run.latency));
        line.latency_of = "request";
        line.ops = run.requests;
        line.errors = run.errors;
        line.first_error = run.first_error;
        self.ceiling_lines.push(line);
        self.ceilings.insert(clients, ceiling.clone());
        Ok(ceiling)
    }
}

/// The whole report, as `--json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The server measured.
    pub server: String,
    /// Load threads of the bench's client.
    pub threads: usize,
    /// One entry per line; the ceilings first.
    pub results: Vec<BenchResult>,
}

/// Runs `delayq bench`.
pub async fn run(args: BenchArgs, out: &mut dyn Write) -> Result<(), BenchError> {
    if let Which::Beanstalk(bench) = &args.which {
        return run_beanstalk(&args.client, bench, out).await;
    }
    let (url, addr) = check_loopback(&args.client.server).await?;
    let client = bench_client(&url, args.client.token.clone())?;
    client.healthz().await?;
    require(
        "",
        (1..=64).contains(&args.client.threads),
        "--threads must be 1 to 64",
    )?;
    require(
        "",
        (1..=MAX_DURATION_MS).contains(&args.client.ceiling_time),
        "--ceiling-time must be 1ms to 10m",
    )?;
    let mut ctx = Ctx {
        client,
        endpoint: Endpoint::new(addr, args.client.token.as_deref(), url.path()),
        threads: args.client.threads,
        ceiling_time: args.client.ceiling_time,
        token: args.client.token.clone(),
        ceilings: BTreeMap::new(),
        ceiling_lines: Vec::new(),
    };
    let results = run_which(&mut ctx, args.which).await?;
    let mut all_results = std::mem::take(&mut ctx.ceiling_lines);
    all_results.extend(results);
    let report = BenchReport {
        server: url.to_string(),
        threads: ctx.threads,
        results: all_results,
    };
    if args.client.json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|err| BenchError::Output(std::io::Error::other(err)))?;
        writeln!(out, "{text}")?;
    } else {
        writeln!(out, "{}", render(&report))?;
    }
    Ok(())
}

/// `delayq bench beanstalk`: no HTTP is spoken, and the report is its own.
async fn run_beanstalk(
    client: &BenchConnection,
    bench: &beanstalk::BeanstalkBench,
    out: &mut dyn Write,
) -> Result<(), BenchError> {
    let addr = beanstalk_addr(&client.server).await?;
    let report = beanstalk::run(addr, bench).await?;
    let text = if client.json {
        serde_json::to_string_pretty(&report).unwrap_or_default() + "\n"
    } else {
        beanstalk::render(&report)
    };
    out.write_all(text.as_bytes()).map_err(BenchError::Output)
}

/// Runs the HTTP benchmark `which` names; its results (the ceilings measured on the way are
/// kept in `ctx`).
async fn run_which(ctx: &mut Ctx, which: Which) -> Result<Vec<BenchResult>, BenchError> {
    Ok(match which {
        Which::Add(bench) => add::run(ctx, &bench.validate()?).await?,
        Which::Pop(bench) => pop::run(ctx, &bench.validate()?).await?,
        Which::Lateness(bench) => {
            let bench = bench.validate()?;
            let consumer = match &bench.consumer_server {
                Some(server) => bench_client(&check_loopback(server).await?.0, ctx.token.clone())?,
                None => ctx.client.clone(),
            };
            lateness::run(&ctx.client, &consumer, &bench).await?
        }
        Which::Push(bench) => push::run(&ctx.client, &bench.validate()?).await?,
        Which::Memory(bench) => memory::run(&ctx.client, &bench.validate()?).await?,
        Which::Dashboard(bench) => {
            dashboard::run(&ctx.client, &ctx.endpoint, &bench.validate()?).await?
        }
        Which::Ceiling(bench) => {
            require(
                "ceiling",
                (1..=MAX_CONCURRENCY).contains(&bench.clients),
                "--clients must be 1 to 1000",
            )?;
            ctx.ceiling(bench.clients, MAX_DURATION_MS).await?;
            Vec::new()
        }
        // Answered by `run_beanstalk`, before any HTTP is spoken.
        Which::Beanstalk(_) => Vec::new(),
        Which::All(all) => {
            let add = add::AddBench {
                duration: all.duration,
                ..add::AddBench::default()
            };
            let mut results = add::run(ctx, &add.validate()?).await?;
            let pop = pop::PopBench {
                tasks: all.tasks,
                ..pop::PopBench::default()
            };
            results.extend(pop::run(ctx, &pop.validate()?).await?);
            let late = lateness::LatenessBench {
                duration: all.duration,
                ..lateness::LatenessBench::default()
            };
            results.extend(lateness::run(&ctx.client, &ctx.client, &late.validate()?).await?);
            results
        }
    })
}

/// The shared client: a pool large enough to keep every concurrent client's connection alive.
fn bench_client(url: &Url, token: Option<String>) -> Result<Client, BenchError> {
    let options = ClientOptions::default()
        .pool_max_idle_per_host(MAX_CONCURRENCY)
        .request_timeout(Duration::from_secs(30));
    Ok(Client::with_options(url.as_str(), token, options)?)
}

/// Refuses any server that is not on a loopback address; returns its URL and the address the
/// light client connects to.
/// The `HOST:PORT` of a beanstalk server, which must be on loopback.
async fn beanstalk_addr(server: &str) -> Result<SocketAddr, BenchError> {
    if server.contains("://") {
        return Err(BenchError::usage(format!(
            "delayq bench beanstalk needs --server HOST:PORT of a beanstalk listener, not {server}"
        )));
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(server)
        .await
        .map_err(|err| BenchError::usage(format!("cannot resolve {server}: {err}")))?
        .collect();
    match addrs.first() {
        Some(first) if addrs.iter().all(|a| a.ip().is_loopback()) => Ok(*first),
        _ => Err(BenchError::usage(format!(
            "delayq bench only measures a loopback server; {server} is not one"
        ))),
    }
}

async fn check_loopback(server: &str) -> Result<(Url, SocketAddr), BenchError> {
    let url = Url::parse(server)
        .map_err(|err| BenchError::usage(format!("invalid --server {server:?}: {err}")))?;
    let host = url
        .host_str()
        .ok_or_else(|| BenchError::usage(format!("invalid --server {server:?}: no host")))?;
    if url.scheme() != "http" {
        return Err(BenchError::usage(format!(
            "delayq bench speaks plain http to a loopback server; {server} is {}",
            url.scheme()
        )));
    }
    let port = url.port_or_known_default().unwrap_or(80);
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<IpAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((bare, port))
            .await
            .map_err(|err| BenchError::usage(format!("cannot resolve {host}: {err}")))?
            .map(|addr| addr.ip())
            .collect(),
    };
    match addrs.first() {
        Some(first) if addrs.iter().all(IpAddr::is_loopback) => {
            Ok((url.clone(), SocketAddr::new(*first, port)))
        }
        _ => Err(BenchError::usage(format!(
            "delayq bench only targets loopback addresses (127.0.0.0/8, ::1); \
             {server} is {addrs:?}"
        ))),
    }
}

/// Adds tasks `from..to` in batches of `batch`, `in_flight` requests at a time, task `i` made
/// by `task(i)`; returns how many items of the answers `counts` says were added (`bench` names
/// the benchmark in an error).
pub async fn add_in_batches<F>(
    client: &Client,
    bench: &'static str,
    (from, to): (u64, u64),
    (batch, in_flight): (u64, u64),
    task: F,
    counts: fn(&delayq_client::BatchItem) -> bool,
) -> Result<u64, BenchError>
where
    F: Fn(u64) -> delayq_client::NewTask + Clone + Send + 'static,
{
    let batch = batch.max(1);
    let batches = to.saturating_sub(from).div_ceil(batch);
    let mut handles = Vec::new();
    for lane in 0..in_flight.min(batches) {
        let (client, task) = (client.clone(), task.clone());
        handles.push(tokio::spawn(async move {
            let mut added = 0u64;
            let mut b = lane;
            while b < batches {
                let first = from + b * batch;
                let tasks: Vec<_> = (first..(first + batch).min(to)).map(&task).collect();
                let items = client.add_batch(&tasks).await?;
                added += items.iter().filter(|item| counts(item)).count() as u64;
                b += in_flight;
            }
            Ok::<_, delayq_client::ClientError>(added)
        }));
    }
    let mut added = 0;
    for handle in handles {
        added += handle.await.map_err(|err| BenchError::Bench {
            bench,
            reason: format!("a fill task failed: {err}"),
        })??;
    }
    Ok(added)
}

/// A histogram of microseconds, from 1 µs to an hour, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; this cannot fail.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// A unique suffix for this run's topics and ids, so runs never collide.
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{:x}", nanos % (1 << 48))
}

/// `1234567.8` → `1 234 568`.
pub fn group_digits(value: f64) -> String {
    if value < 100.0 && value.fract() != 0.0 {
        return format!("{value:.2}");
    }
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// The report as a table for people, then each figure in a sentence with its ceiling, and
/// the notes.
pub fn render(report: &BenchReport) -> String {
    let mut table = Table::new();
    table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(vec![
            "bench",
            "what is measured",
            "result",
            "of the ceiling",
            "target (docs/design.md §6)",
            "met",
            "latency",
            "errors",
        ]);
    for r in &report.results {
        let latency = match &r.latency_ms {
            Some(p) => format!("{}: {}", r.latency_of, p.words()),
            None => "-".into(),
        };
        let ratios = if r.ratios.is_empty() {
            "-".to_owned()
        } else {
            r.ratios
                .iter()
                .map(|x| format!("{} of {}", percent(x.percent), x.against))
                .collect::<Vec<_>>()
                .join("\n")
        };
        table.add_row(vec![
            Cell::new(&r.bench),
            Cell::new(&r.measured),
            Cell::new(format!("{} {}", group_digits(r.figure), r.unit))
                .set_alignment(CellAlignment::Right),
            Cell::new(ratios),
            Cell::new(r.target.map(|t| t.words()).unwrap_or_else(|| "-".into())),
            Cell::new(match r.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            }),
            Cell::new(latency),
            Cell::new(r.errors.to_string()),
        ]);
    }
    let mut text = format!(
        "delayq bench against {} ({} load thread{})\n{table}",
        report.server,
        report.threads,
        if report.threads == 1 { "" } else { "s" }
    );
    for r in report.results.iter().filter(|r| r.ceiling.is_some()) {
        text.push_str(&format!("\n{}", r.sentence()));
    }
    for r in &report.results {
        for note in &r.notes {
            text.push_str(&format!("\n{}: {note}", r.bench));
        }
        if let Some(error) = &r.first_error {
            text.push_str(&format!("\n{}: first error: {error}", r.bench));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_grouped() {
        let table = [
            (0.0, "0"),
            (999.0, "999"),
            (1_000.0, "1 000"),
            (52_310.4, "52 310"),
            (1_234_567.0, "1 234 567"),
            (1.234, "1.23"),
        ];
        for (value, want) in table {
            assert_eq!(group_digits(value), want, "{value}");
        }
    }

    #[test]
    fn targets_compare_both_ways() {
        let adds = Target {
            op: ">=",
            value: 50_000.0,
            unit: "tasks/s",
            condition: "50 clients",
        };
        let late = Target {
            op: "<=",
            value: 2.0,
            unit: "ms",
            condition: "p99",
        };
        assert!(adds.met_by(50_000.0) && !adds.met_by(49_999.0));
        assert!(late.met_by(1.5) && !late.met_by(2.1));
    }

    fn add_line(figure: f64) -> BenchResult {
        let mut r = BenchResult::new("add", "POST /add", figure, "tasks/s", Some(add::TARGET));
        let ceiling = Ceiling {
            measured: "GET /healthz, 50 clients".into(),
            requests_per_s: 46_500.0,
        };
        r.compare(&ceiling, &[FULL]);
        r
    }

    #[test]
    fn figures_are_compared_with_the_ceiling() {
        let r = add_line(28_400.0);
        assert_eq!(r.ratios.len(), 1);
        assert!(
            (r.ratios[0].percent - 61.075).abs() < 0.01,
            "{:?}",
            r.ratios
        );
        assert_eq!(r.met, Some(false));
        assert_eq!(
            r.sentence(),
            "add: 28 400 tasks/s = 61 % of the /healthz ceiling 46 500 req/s; \
             target ≥ 90 % of the ceiling (50 clients, 1 task a request, embedded, fsync \
             interval), NOT met"
        );
        assert_eq!(add_line(45_000.0).met, Some(true));

        // Two requests a task: half the ceiling is what a task can reach.
        let mut pop = BenchResult::new("pop", "pop+finish", 18_600.0, "tasks/s", Some(pop::TARGET));
        let ceiling = Ceiling {
            measured: "GET /healthz, 32 clients".into(),
            requests_per_s: 46_500.0,
        };
        pop.compare(&ceiling, &[HALF, FULL]);
        assert_eq!(pop.ratios[0].tasks_per_s, 23_250.0);
        assert_eq!(percent(pop.ratios[0].percent), "80 %");
        assert_eq!(percent(pop.ratios[1].percent), "40 %");
        assert_eq!(pop.met, Some(true));
        assert!(
            pop.sentence()
                .starts_with("pop: 18 600 tasks/s = 80 % of half the ceiling (23 250 tasks/s), 40 % of the /healthz ceiling 46 500 req/s"),
            "{}",
            pop.sentence()
        );
        assert_eq!(percent(4.56), "4.6 %");
        assert_eq!(Ratio::of(5.0, 0.0, "the ceiling", 1.0).percent, 0.0);
    }

    #[test]
    fn the_json_report_carries_every_figure_ceiling_and_ratio() {
        let report = BenchReport {
            server: "http://127.0.0.1:9280/".into(),
            threads: 1,
            results: vec![add_line(28_400.0)],
        };
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["threads"], 1);
        let r = &v["results"][0];
        for key in [
            "bench", "measured", "figure", "unit", "target", "met", "ceiling", "ratios", "notes",
        ] {
            assert!(r.get(key).is_some(), "{key} missing: {r}");
        }
        assert_eq!(r["ceiling"]["requests_per_s"], 46_500.0);
        assert_eq!(r["ratios"][0]["against"], "the ceiling");
        assert!(r["ratios"][0]["percent"].as_f64().unwrap() > 61.0);
        assert_eq!(r["target"]["unit"], "% of the ceiling");
        assert_eq!(r["met"], false);
    }

    #[tokio::test]
    async fn only_loopback_servers() {
        let table = [
            ("http://127.0.0.1:9280", true),
            ("http://127.1.2.3:9280", true),
            ("http://[::1]:9280", true),
            ("http://localhost:9280", true),
            ("http://10.0.0.1:9280", false),
            ("http://8.8.8.8", false),
        ];
        for (server, ok) in table {
            assert_eq!(check_loopback(server).await.is_ok(), ok, "{server}");
        }
        let (_, addr) = check_loopback("http://127.0.0.1:9280").await.unwrap();
        assert_eq!(addr, "127.0.0.1:9280".parse().unwrap());
        assert!(check_loopback("https://127.0.0.1:9280").await.is_err());
    }
}
