//! `delayq bench dashboard`: the web dashboard at scale (docs/design.md §6: with 1 000 topics
//! and 1M tasks, first view ≤ 1 s, find by id ≤ 50 ms).
//!
//! It fills the server with `--tasks` DELAYED tasks spread over `--topics` topics (due times
//! spread over the next week, so every topic has a timeline; `on_duplicate: keep`, so a second
//! run on the same server adds nothing and measures the same state), waits a moment for the
//! server's history to have samples, then measures from its own light client, one request at
//! a time:
//! - **first view**: `GET /`, the overview's whole HTML as a browser first gets it (every
//!   topic's counters, the first page of the topic table, the charts drawn), and `GET
//!   /ui/topic` of one topic (its counters, three timelines from range counts, a page of tasks);
//! - **find by id**: `GET /ui/find?id=` (the id looked up across every topic) followed by the
//!   task page it redirects to, as one figure: what a person waits for after pressing Find.
//!
//! The page's script and stylesheet are a few kilobytes from memory and not counted.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Args;
use delayq_client::{AddOutcome, Client, NewTask, OnDuplicate};
use hdrhistogram::Histogram;

use super::http::{Conn, Endpoint};
use super::{BenchResult, MAX_TASKS, Percentiles, Target};
use crate::BenchError;

/// docs/design.md §6: the dashboard's first view.
pub const FIRST_VIEW: Target = Target {
    op: "<=",
    value: 1_000.0,
    unit: "ms p99",
    condition: "1 000 topics, 1M tasks",
};

/// docs/design.md §6: find by id.
pub const FIND: Target = Target {
    op: "<=",
    value: 50.0,
    unit: "ms p99",
    condition: "1 000 topics, 1M tasks",
};

/// Batches of the fill in flight at once.
const FILL_CONCURRENCY: u64 = 4;

/// The flags of `delayq bench dashboard`.
#[derive(Debug, Clone, Args)]
pub struct DashboardBench {
    /// Topics to spread the tasks over (`dash-0000`, `dash-0001`, ...).
    #[arg(long, default_value_t = 1_000)]
    pub topics: u64,
    /// Tasks in all.
    #[arg(long, default_value_t = 1_000_000)]
    pub tasks: u64,
    /// Tasks per add request while filling.
    #[arg(long, default_value_t = 5_000)]
    pub batch: usize,
    /// Requests measured per figure.
    #[arg(long, default_value_t = 30)]
    pub samples: u64,
}

impl DashboardBench {
    /// Checks the bounds of every setting.
    pub fn validate(&self) -> Result<DashboardBench, BenchError> {
        let check = |ok: bool, what: &str| super::require("dashboard", ok, what);
        super::in_range("dashboard", "--topics", self.topics, 1..=100_000)?;
        check(
            (self.topics..=MAX_TASKS).contains(&self.tasks),
            "--tasks must be at least --topics and at most 20000000",
        )?;
        super::in_range("dashboard", "--batch", self.batch, 1..=10_000)?;
        super::in_range("dashboard", "--samples", self.samples, 1..=10_000)?;
        Ok(self.clone())
    }
}

fn topic(i: u64) -> String {
    format!("dash-{i:04}")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs the benchmark against the server at `endpoint` (the general `client` fills it).
pub async fn run(
    client: &Client,
    endpoint: &Endpoint,
    bench: &DashboardBench,
) -> Result<Vec<BenchResult>, BenchError> {
    let mut results = vec![fill(client, bench).await?];
    // The overview draws the history's charts: let the sampler publish a few seconds first.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut conn = Conn::connect(endpoint.addr).await.map_err(http)?;
    let overview = endpoint.get("/");
    let (first_view, bytes) = measure(&mut conn, bench.samples, &[overview.as_slice()]).await?;
    results.push(line(
        "dashboard first view",
        format!(
            "GET / (overview HTML, {} KiB, {} topics, {} tasks), one at a time",
            bytes / 1024,
            bench.topics,
            bench.tasks
        ),
        &first_view,
        FIRST_VIEW,
    ));
    let topic_page = endpoint.get(&format!("/ui/topic?name={}", topic(bench.topics / 2)));
    let (topic_view, bytes) = measure(&mut conn, bench.samples, &[topic_page.as_slice()]).await?;
    results.push(line(
        "dashboard topic view",
        format!(
            "GET /ui/topic (counters, 3 timelines, 50 tasks; {} KiB), one at a time",
            bytes / 1024
        ),
        &topic_view,
        FIRST_VIEW,
    ));
    // An id in the middle of the fill, in the topic it was added to.
    let n = bench.tasks / 2;
    let id = format!("t{n}");
    let find = endpoint.get(&format!("/ui/find?id={id}"));
    let task = endpoint.get(&format!(
        "/ui/task?topic={}&id={id}",
        topic(n % bench.topics)
    ));
    let (found, _) = measure(
        &mut conn,
        bench.samples,
        &[find.as_slice(), task.as_slice()],
    )
    .await?;
    results.push(line(
        "dashboard find by id",
        format!(
            "GET /ui/find?id= across {} topics, then the task page",
            bench.topics
        ),
        &found,
        FIND,
    ));
    Ok(results)
}

fn http(err: super::http::HttpError) -> BenchError {
    BenchError::Bench {
        bench: "dashboard",
        reason: err.to_string(),
    }
}

/// Sends `requests` in turn, `samples` times; the latency of each round in a histogram, and
/// the bytes of the first round's last answer.
async fn measure(
    conn: &mut Conn,
    samples: u64,
    requests: &[&[u8]],
) -> Result<(Histogram<u64>, usize), BenchError> {
    let mut latency = super::histogram();
    let mut bytes = 0;
    for _ in 0..samples {
        let start = Instant::now();
        for request in requests {
            let answer = conn.exchange(request).await.map_err(http)?;
            // 303: find's redirect to the task page, which the next request fetches.
            if answer.status != 200 && answer.status != 303 {
                return Err(BenchError::Bench {
                    bench: "dashboard",
                    reason: format!(
                        "the dashboard answered {}: {}",
                        answer.status,
                        String::from_utf8_lossy(&answer.body[..answer.body.len().min(300)])
                    ),
                });
            }
            bytes = answer.body.len();
        }
        latency.saturating_record(start.elapsed().as_micros() as u64);
    }
    Ok((latency, bytes))
}

fn line(bench: &str, measured: String, latency: &Histogram<u64>, target: Target) -> BenchResult {
    let p = Percentiles::from_micros(latency);
    let mut result = BenchResult::new(bench, measured, p.p99, "ms p99", Some(target));
    result.latency_ms = Some(p);
    result.latency_of = "page";
    result.ops = latency.len();
    result
}

/// Adds the tasks in batches, a few requests in flight; task `i` goes to topic `i % topics`
/// with a due time spread over the next week.
async fn fill(client: &Client, bench: &DashboardBench) -> Result<BenchResult, BenchError> {
    let start = Instant::now();
    let base = now_ms() + 60_000;
    let week = 7 * 86_400_000;
    let topics = bench.topics;
    let task = move |i: u64| {
        // A multiplicative hash spreads the due times evenly and reproducibly.
        let due = base + i.wrapping_mul(2_654_435_761) % week;
        NewTask::new(topic(i % topics), format!("t{i}"))
            .body("{\"bench\":\"dashboard\"}")
            .run_at_ms(due)
            .on_duplicate(OnDuplicate::Keep)
    };
    let batches = (bench.batch as u64, FILL_CONCURRENCY);
    // Tasks a previous run added come back as existed: not counted.
    let added = super::add_in_batches(
        client,
        "dashboard",
        (0, bench.tasks),
        batches,
        task,
        |item| item.result == Ok(AddOutcome::Added),
    )
    .await?;
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let mut result = BenchResult::new(
        "dashboard (fill)",
        format!(
            "POST /add, {} tasks per request over {} topics, {FILL_CONCURRENCY} in flight \
             (on_duplicate keep: a second run adds nothing)",
            bench.batch, bench.topics
        ),
        added as f64 / secs,
        "tasks/s",
        None,
    );
    result.ops = added;
    Ok(result)
}
