//! `delayq bench beanstalk`: the beanstalkd protocol measured from the same client against any
//! server that speaks it (delayq's listener, or beanstalkd itself), so that the two can be
//! compared in one run (docs/design.md §6: delayq ≥ 1.0× beanstalkd, same client, same
//! durability).
//!
//! Two phases over `--connections` connections, each with one command in flight (the way
//! beanstalk clients work):
//!
//! 1. put: `--jobs` jobs of `--body-bytes` bytes into a fresh tube, split over the
//!    connections; jobs/s and the latency of each put.
//! 2. reserve + delete: the connections watch that tube only and reserve and delete until
//!    every job is done; jobs/s (one reserve and one delete a job) and the latency of a
//!    reserve + delete pair.
//!
//! Only loopback servers are accepted, as for every `delayq bench`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::BenchError;

/// `delayq bench beanstalk`.
#[derive(Debug, Clone, Args)]
pub struct BeanstalkBench {
    /// Concurrent connections, one command in flight on each.
    #[arg(long, default_value_t = 10)]
    pub connections: usize,
    /// Jobs to put and then reserve and delete.
    #[arg(long, default_value_t = 50_000)]
    pub jobs: u64,
    /// Bytes of each job's body.
    #[arg(long, default_value_t = 100)]
    pub body_bytes: usize,
}

/// One phase's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Phase {
    /// `put` or `reserve+delete`.
    pub name: &'static str,
    /// Jobs done.
    pub jobs: u64,
    /// Wall time of the phase.
    pub seconds: f64,
    /// Jobs per second.
    pub jobs_per_sec: f64,
    /// Latency percentiles of one job's commands, in microseconds.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The server measured.
    pub server: String,
    /// Connections.
    pub connections: usize,
    /// Body size.
    pub body_bytes: usize,
    /// The phases.
    pub phases: Vec<Phase>,
}

struct Conn {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
    line: String,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Result<Conn, BenchError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| BenchError::usage(format!("cannot connect to {addr}: {e}")))?;
        stream.set_nodelay(true).ok();
        let (r, w) = stream.into_split();
        Ok(Conn {
            r: BufReader::new(r),
            w,
            line: String::new(),
        })
    }

    /// Sends `bytes` and reads the reply line (and skips the data of a RESERVED reply),
    /// returning the line.
    async fn call(&mut self, bytes: &[u8]) -> Result<&str, BenchError> {
        let io = |e: std::io::Error| BenchError::usage(format!("beanstalk connection: {e}"));
        self.w.write_all(bytes).await.map_err(io)?;
        self.line.clear();
        if self.r.read_line(&mut self.line).await.map_err(io)? == 0 {
            return Err(BenchError::usage("the server closed the connection"));
        }
        if let Some(rest) = self.line.strip_prefix("RESERVED ")
            && let Some(n) = rest
                .trim_end()
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<usize>().ok())
        {
            let mut data = vec![0u8; n + 2];
            self.r.read_exact(&mut data).await.map_err(io)?;
        }
        Ok(self.line.trim_end())
    }
}

fn unexpected(what: &str, line: &str) -> BenchError {
    BenchError::usage(format!("{what}: unexpected reply {line:?}"))
}

/// The jobs done by one connection and their latencies.
type Share = Result<(u64, Histogram<u64>), BenchError>;

/// Runs both phases against the beanstalk server at `addr`.
pub async fn run(addr: SocketAddr, bench: &BeanstalkBench) -> Result<Report, BenchError> {
    if !(1..=super::MAX_CONCURRENCY).contains(&bench.connections) {
        return Err(BenchError::usage("--connections must be 1 to 1000"));
    }
    if !(1..=10_000_000).contains(&bench.jobs) || bench.body_bytes > 65_535 {
        return Err(BenchError::usage(
            "--jobs must be 1 to 10000000 and --body-bytes at most 65535",
        ));
    }
    let tube = format!(
        "bench-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let mut put = format!("put 1024 0 60 {}\r\n", bench.body_bytes).into_bytes();
    put.extend(std::iter::repeat_n(b'x', bench.body_bytes));
    put.extend_from_slice(b"\r\n");
    let put = Arc::new(put);

    // Phase 1: put.
    let mut tasks = tokio::task::JoinSet::new();
    let started = Instant::now();
    for i in 0..bench.connections {
        let share = bench.jobs / bench.connections as u64
            + u64::from((i as u64) < bench.jobs % bench.connections as u64);
        tasks.spawn(put_jobs(addr, tube.clone(), Arc::clone(&put), share));
    }
    let put_phase = collect("put", &mut tasks, started).await?;

    // Phase 2: reserve + delete until every job is gone.
    let started = Instant::now();
    for _ in 0..bench.connections {
        tasks.spawn(take_jobs(addr, tube.clone()));
    }
    let take_phase = collect("reserve+delete", &mut tasks, started).await?;
    if take_phase.jobs != put_phase.jobs {
        return Err(BenchError::usage(format!(
            "{} jobs were put but {} reserved and deleted",
            put_phase.jobs, take_phase.jobs
        )));
    }
    Ok(Report {
        server: addr.to_string(),
        connections: bench.connections,
        body_bytes: bench.body_bytes,
        phases: vec![put_phase, take_phase],
    })
}

/// One connection of the put phase: `share` puts of the command `put` into `tube`.
async fn put_jobs(addr: SocketAddr, tube: String, put: Arc<Vec<u8>>, share: u64) -> Share {
    let mut c = Conn::open(addr).await?;
    let line = c.call(format!("use {tube}\r\n").as_bytes()).await?;
    if !line.starts_with("USING") {
        return Err(unexpected("use", line));
    }
    let mut h = histogram();
    for _ in 0..share {
        let t = Instant::now();
        let line = c.call(&put).await?;
        if !line.starts_with("INSERTED") {
            return Err(unexpected("put", line));
        }
        let _ = h.record(t.elapsed().as_micros() as u64);
    }
    Ok((share, h))
}

/// One connection of the take phase: reserve + delete from `tube` until it is empty.
async fn take_jobs(addr: SocketAddr, tube: String) -> Share {
    let mut c = Conn::open(addr).await?;
    c.call(format!("watch {tube}\r\n").as_bytes()).await?;
    let line = c.call(b"ignore default\r\n").await?;
    if !line.starts_with("WATCHING") {
        return Err(unexpected("ignore", line));
    }
    let mut h = histogram();
    let mut done = 0;
    loop {
        let t = Instant::now();
        let line = c.call(b"reserve-with-timeout 0\r\n").await?;
        if line == "TIMED_OUT" {
            break;
        }
        let id = line
            .strip_prefix("RESERVED ")
            .and_then(|r| r.split(' ').next())
            .ok_or_else(|| unexpected("reserve", line))?
            .to_owned();
        let line = c.call(format!("delete {id}\r\n").as_bytes()).await?;
        if line != "DELETED" {
            return Err(unexpected("delete", line));
        }
        let _ = h.record(t.elapsed().as_micros() as u64);
        done += 1;
    }
    Ok((done, h))
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

async fn collect(
    name: &'static str,
    tasks: &mut tokio::task::JoinSet<Share>,
    started: Instant,
) -> Result<Phase, BenchError> {
    let mut jobs = 0;
    let mut all = histogram();
    while let Some(joined) = tasks.join_next().await {
        let (n, h) =
            joined.map_err(|e| BenchError::usage(format!("a bench task failed: {e}")))??;
        jobs += n;
        all.add(&h).ok();
    }
    let seconds = started
        .elapsed()
        .max(Duration::from_micros(1))
        .as_secs_f64();
    Ok(Phase {
        name,
        jobs,
        seconds,
        jobs_per_sec: jobs as f64 / seconds,
        p50_us: all.value_at_quantile(0.5),
        p99_us: all.value_at_quantile(0.99),
    })
}

/// The report as text.
pub fn render(report: &Report) -> String {
    let mut out = format!(
        "beanstalk {}: {} connections, {}-byte jobs\n",
        report.server, report.connections, report.body_bytes
    );
    for p in &report.phases {
        out.push_str(&format!(
            "  {:<15} {:>8} jobs in {:>6.2} s: {:>9.0} jobs/s, p50 {} µs, p99 {} µs\n",
            p.name, p.jobs, p.seconds, p.jobs_per_sec, p.p50_us, p.p99_us
        ));
    }
    out
}
