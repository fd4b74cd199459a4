//! `delayq bench pop`: pop + finish per second from concurrent workers, against the ceiling.
//!
//! Two modes, each on its own topic, first filled with `--tasks` ready tasks by batch adds
//! (reported on its own line, without a target); the benchmark waits until the server counts
//! them all ready. Then `--workers` workers each loop until all tasks are finished or
//! `--max-time` has passed:
//!
//! - `single`: pop one task, finish it with its receipt: two requests a task, so the figure is
//!   compared with half the `/healthz` ceiling (docs/design.md §6: ≥ 80 %) and with the ceiling;
//! - `batch`: pop `--count` tasks, finish them all with one batched `/finish`: two requests
//!   for `--count` tasks, which can beat the ceiling;
//! - `next`: ack and take the next: each pop (count 1) carries the finish of the task popped
//!   before, one request a task, compared with the ceiling (docs/design.md §6: ≥ 80 %).
//!
//! The figure is tasks finished per second, from the start of the popping to the last finish.
//!
//! With `--max-active N`, the `single` mode runs again on a topic with `max_active` N (docs/
//! flow-control.md), and a row gives its rate as a share of the run without (issue 26: at most
//! 10 % slower). With `--rate-limit R`, the `single` mode runs on a topic with `rate_per_s` R
//! (`R × 5` tasks, so about five seconds), and a row gives the rate reached against the most
//! the limit allows (above 100 % would mean the limit was exceeded).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use delayq_client::{Client, ClientError, FlowLimits, NewTask};
use serde::Deserialize;
use std::borrow::Cow;

use super::http::{Conn, Endpoint};
use super::load::{self, LoadRun, run_clients};
use super::{
    BenchResult, Ctx, FULL, HALF, MAX_CONCURRENCY, MAX_DURATION_MS, MAX_TASKS, Percentiles, Target,
};
use crate::BenchError;
use crate::duration::{format_duration, parse_duration};

/// docs/design.md §6: pop + finish with 32 workers, one task a pop: two requests a task.
pub const TARGET: Target = Target {
    op: ">=",
    value: 80.0,
    unit: "% of half the ceiling",
    condition: "32 workers, pop count 1",
};

/// Issue 15: `pop count=N` and one batched finish beats the ceiling.
pub const BATCH_TARGET: Target = Target {
    op: ">=",
    value: 100.0,
    unit: "% of the ceiling",
    condition: "32 workers, pop count N + one batched finish; issue 15, not in docs/design.md §6",
};

/// docs/design.md §6: ack and take the next, one request a task.
pub const NEXT_TARGET: Target = Target {
    op: ">=",
    value: 80.0,
    unit: "% of the ceiling",
    condition: "32 workers, ack and take the next (one request a task)",
};

/// How the workers pop and finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// One task a pop, one finish a task.
    Single,
    /// `--count` tasks a pop, one batched finish for them.
    Batch,
    /// One task a pop, finished by the next pop.
    Next,
    /// `single` and `batch`, one after the other.
    Both,
    /// All three, one after the other.
    All,
}

/// How one run of workers pops and finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Single,
    Batch,
    Next,
}

impl Mode {
    fn kinds(self) -> &'static [Kind] {
        match self {
            Mode::Single => &[Kind::Single],
            Mode::Batch => &[Kind::Batch],
            Mode::Next => &[Kind::Next],
            Mode::Both => &[Kind::Single, Kind::Batch],
            Mode::All => &[Kind::Single, Kind::Batch, Kind::Next],
        }
    }
}

/// The flags of `delayq bench pop`.
#[derive(Debug, Clone, Args)]
pub struct PopBench {
    /// Concurrent workers, each popping and finishing.
    #[arg(long, default_value_t = 32)]
    pub workers: usize,
    /// How many tasks to pre-fill, pop and finish.
    #[arg(long, default_value_t = 200_000)]
    pub tasks: u64,
    /// Tasks per pop request in the batched mode (finished with one batched `/finish`).
    #[arg(long, default_value_t = 50)]
    pub count: usize,
    /// Which modes to run.
    #[arg(long, value_enum, default_value_t = Mode::All)]
    pub mode: Mode,
    /// Tasks per batch add while pre-filling.
    #[arg(long, default_value_t = 1_000)]
    pub prefill_batch: usize,
    /// Bytes of body per task.
    #[arg(long, default_value_t = 100)]
    pub body_bytes: usize,
    /// Give up popping after this long.
    #[arg(long, value_parser = parse_duration, default_value = "2m", value_name = "DURATION")]
    pub max_time: u64,
    /// Also run `single` on a topic with this `max_active`, and compare.
    #[arg(long, value_name = "N")]
    pub max_active: Option<u32>,
    /// Also run `single` on a topic with this `rate_per_s`, and report the rate reached.
    #[arg(long, value_name = "PER_S")]
    pub rate_limit: Option<f64>,
}

impl Default for PopBench {
    fn default() -> Self {
        PopBench {
            workers: 32,
            tasks: 200_000,
            count: 50,
            mode: Mode::All,
            prefill_batch: 1_000,
            body_bytes: 100,
            max_time: 120_000,
            max_active: None,
            rate_limit: None,
        }
    }
}

impl PopBench {
    /// Checks the bounds of every setting.
    pub fn validate(&self) -> Result<PopBench, BenchError> {
        let check = |ok: bool, what: &str| super::require("pop", ok, what);
        super::in_range("pop", "--workers", self.workers, 1..=MAX_CONCURRENCY)?;
        super::in_range("pop", "--tasks", self.tasks, 1..=MAX_TASKS)?;
        super::in_range("pop", "--count", self.count, 1..=1_000)?;
        check(
            self.tasks.saturating_mul(self.mode.kinds().len() as u64) <= MAX_TASKS,
            "--tasks times the modes run must be at most 20000000",
        )?;
        super::in_range("pop", "--prefill-batch", self.prefill_batch, 1..=10_000)?;
        super::body_bytes("pop", self.body_bytes)?;
        check(
            (1..=MAX_DURATION_MS).contains(&self.max_time),
            "--max-time must be 1ms to 10m",
        )?;
        check(
            self.max_active.is_none_or(|n| (1..=1_000_000).contains(&n)),
            "--max-active must be 1 to 1000000",
        )?;
        check(
            self.rate_limit
                .is_none_or(|r| r.is_finite() && (1.0..=100_000.0).contains(&r)),
            "--rate-limit must be 1 to 100000",
        )?;
        Ok(self.clone())
    }
}

/// How many batch adds are in flight while pre-filling.
const PREFILL_CONCURRENCY: u64 = 4;
/// How long to wait for the pre-filled tasks to be counted ready.
const READY_WAIT: Duration = Duration::from_secs(30);

/// issue 26: pop + finish on a topic with `max_active` at most 10 % slower than without.
pub const MAX_ACTIVE_TARGET: Target = Target {
    op: ">=",
    value: 90.0,
    unit: "% of pop without limits",
    condition: "pop count 1 + finish, the same workers, max_active set; issue 26",
};

/// Runs the benchmark: the ceiling for the workers, then each mode, then the limited runs.
pub async fn run(ctx: &mut Ctx, bench: &PopBench) -> Result<Vec<BenchResult>, BenchError> {
    let ceiling = ctx.ceiling(bench.workers, MAX_DURATION_MS).await?;
    let mut results = Vec::new();
    let mut kinds: Vec<(Kind, FlowLimits)> = bench
        .mode
        .kinds()
        .iter()
        .map(|&k| (k, FlowLimits::default()))
        .collect();
    if let Some(n) = bench.max_active {
        kinds.push((Kind::Single, FlowLimits::max_active(n)));
    }
    if let Some(r) = bench.rate_limit {
        kinds.push((Kind::Single, FlowLimits::default().with_rate(r, None)));
    }
    let mut unlimited_single = None;
    for (kind, limits) in kinds {
        let topic = format!("bench-pop-{}", super::run_id());
        let bench = &match limits.rate_per_s {
            // About five seconds of the rate.
            Some(r) => PopBench {
                tasks: ((r * 5.0) as u64).max(1),
                ..bench.clone()
            },
            None => bench.clone(),
        };
        if !limits.is_empty() {
            ctx.client.limits_set(&topic, &limits).await?;
        }
        results.push(prefill(&ctx.client, &topic, bench).await?);
        let ready_after = wait_ready(&ctx.client, &topic, bench.tasks).await?;
        let mut result = measure(ctx, bench, &topic, kind).await?;
        if kind == Kind::Single && limits.is_empty() {
            unlimited_single = Some(result.figure);
        }
        if !limits.is_empty() {
            results.push(limited(&mut result, &limits, unlimited_single));
        }
        match kind {
            Kind::Single => result.compare(&ceiling, &[HALF, FULL]),
            Kind::Batch | Kind::Next => result.compare(&ceiling, &[FULL, HALF]),
        }
        result.notes.push(format!(
            "all pre-filled tasks were counted ready {} after the pre-fill",
            format_duration(ready_after)
        ));
        results.push(result);
    }
    Ok(results)
}

/// Names the run of `result` by its `limits` and gives the row that judges it: with
/// `max_active`, its rate as a share of the same run without limits (`unlimited`); with a
/// rate, the rate reached as a share of the limit.
fn limited(result: &mut BenchResult, limits: &FlowLimits, unlimited: Option<f64>) -> BenchResult {
    let (name, share, of, target) = match (limits.max_active, limits.rate_per_s) {
        (Some(n), _) => (
            format!("pop (max_active {n})"),
            unlimited.map(|u| 100.0 * result.figure / u.max(f64::MIN_POSITIVE)),
            "the same pop + finish without limits",
            Some(MAX_ACTIVE_TARGET),
        ),
        (None, Some(r)) => {
            // The burst goes at once, the rest at the rate: n tasks take (n - burst) / rate
            // seconds, so the most a run can reach is rate x n / (n - burst).
            let n = result.ops as f64;
            let burst = f64::from(limits.effective_burst().unwrap_or(1));
            let most = if n > burst {
                r * n / (n - burst)
            } else {
                f64::INFINITY
            };
            (
                format!("pop (rate_per_s {r})"),
                Some(100.0 * result.figure / most),
                "the most the limit allows (rate x tasks / (tasks - burst), burst one second of the rate)",
                None,
            )
        }
        (None, None) => unreachable!("a limited run has a limit"),
    };
    result.bench = name.clone();
    result.not_comparable("the run has flow limits".into());
    let mut row = BenchResult::new(
        format!("{name}, share"),
        format!("{} as a share of {of}", result.bench),
        share.unwrap_or(f64::NAN),
        "% of the reference",
        target,
    );
    if let (Some(t), Some(share)) = (target, share) {
        row.met = Some(t.met_by(share));
    }
    if share.is_none() {
        row.notes
            .push("no run without limits to compare with (--mode without single)".into());
    }
    row
}

/// The popping and finishing of one mode.
async fn measure(
    ctx: &Ctx,
    bench: &PopBench,
    topic: &str,
    kind: Kind,
) -> Result<BenchResult, BenchError> {
    let count = if kind == Kind::Batch { bench.count } else { 1 };
    // Every task is ready before the workers start: a `next` worker's pop need not wait, and
    // one that waited at the end would hold the finish it carries.
    let timeout_ms = if kind == Kind::Next {
        0
    } else {
        POP_TIMEOUT_MS
    };
    let requests = Requests::new(&ctx.endpoint, topic, count, timeout_ms);
    let done = Arc::new(AtomicU64::new(0));
    // Tasks handed out so far (the `next` workers': once every task was, the last held ones
    // are finished by a `/finish` of their own rather than by a pop that would wait).
    let taken = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_millis(bench.max_time);
    let (addr, total) = (ctx.endpoint.addr, bench.tasks);
    let shared = done.clone();
    let shared_taken = taken.clone();
    let (run, start) = run_clients("pop", ctx.threads, bench.workers, move |_| {
        worker(
            requests.clone(),
            addr,
            kind,
            total,
            (shared.clone(), shared_taken.clone()),
            deadline,
        )
    })
    .await?;
    let finished = done.load(Ordering::Relaxed);
    let rate = run.rate("pop", finished, start)?;
    let (workers, tasks) = (bench.workers, super::group_digits(bench.tasks as f64));
    let (name, measured, target) = match kind {
        Kind::Batch => (
            "pop (batch)",
            format!(
                "POST /pop (count {count}) then one POST /finish of them, {workers} workers, \
                 {tasks} ready tasks"
            ),
            BATCH_TARGET,
        ),
        Kind::Single => (
            "pop",
            format!(
                "POST /pop (count 1) then POST /finish, {workers} workers, {tasks} ready tasks"
            ),
            TARGET,
        ),
        Kind::Next => (
            "pop (ack and next)",
            format!(
                "POST /pop (count 1) carrying the finish of the task popped before, \
                 {workers} workers, {tasks} ready tasks"
            ),
            NEXT_TARGET,
        ),
    };
    let mut result = BenchResult::new(name, measured, rate, "tasks/s", Some(target));
    result.latency_ms = Some(Percentiles::from_micros(&run.latency));
    result.latency_of = "pop or finish request";
    result.ops = finished;
    result.errors = run.errors;
    result.first_error = run.first_error;
    result.notes.push(format!(
        "{finished} of {} tasks finished in {} requests",
        bench.tasks, run.requests
    ));
    if finished < bench.tasks {
        result.notes.push(format!(
            "stopped by --max-time {} before all tasks were finished",
            format_duration(bench.max_time)
        ));
    }
    if bench.workers != 32 {
        result.not_comparable(format!(
            "the target is for 32 workers; this run had {}",
            bench.workers
        ));
    }
    Ok(result)
}

/// A worker's requests: the pop, serialized once, and what the finishes are built from.
#[derive(Debug, Clone)]
struct Requests {
    endpoint: Endpoint,
    pop: Vec<u8>,
    /// The pop's JSON without its closing brace, for a pop that carries a finish.
    pop_fields: Vec<u8>,
    /// `{"topic":"T","id":` : the start of every finish of this topic.
    task_start: Vec<u8>,
}

/// The long-poll timeout of the workers' pops: short, so they notice the end quickly.
const POP_TIMEOUT_MS: u64 = 200;

impl Requests {
    fn new(endpoint: &Endpoint, topic: &str, count: usize, timeout_ms: u64) -> Requests {
        // The topic is this run's own plain ASCII name: valid JSON text as it is.
        let fields = format!(r#"{{"topic":"{topic}","count":{count},"timeout_ms":{timeout_ms}"#);
        let pop = format!("{fields}}}");
        Requests {
            endpoint: endpoint.clone(),
            pop: endpoint.post("/pop", pop.as_bytes()),
            pop_fields: fields.into_bytes(),
            task_start: format!(r#"{{"topic":"{topic}","id":"#).into_bytes(),
        }
    }

    /// Writes into `request` a pop (count 1) carrying the finish of `task` (ack and take the
    /// next), using `body` as scratch.
    fn pop_after_into(&self, request: &mut Vec<u8>, body: &mut Vec<u8>, task: &Held) {
        body.clear();
        body.extend_from_slice(&self.pop_fields);
        body.extend_from_slice(br#","finish":"#);
        body.extend_from_slice(&self.task_start);
        // Strings always serialize; the writer is a Vec.
        let _ = serde_json::to_writer(&mut *body, &task.id);
        body.extend_from_slice(br#","receipt":"#);
        let _ = serde_json::to_writer(&mut *body, &task.receipt);
        body.extend_from_slice(b"}}");
        self.endpoint.post_into(request, "/pop", body);
    }

    /// Writes the finish of `tasks` into `request` (one task unwrapped unless `batched`),
    /// using `body` as scratch.
    fn finish_into(
        &self,
        request: &mut Vec<u8>,
        body: &mut Vec<u8>,
        tasks: &[Popped<'_>],
        batched: bool,
    ) {
        body.clear();
        if batched {
            body.extend_from_slice(br#"{"tasks":["#);
        }
        for (i, task) in tasks.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(&self.task_start);
            // Strings always serialize; the writer is a Vec.
            let _ = serde_json::to_writer(&mut *body, task.id.as_ref());
            body.extend_from_slice(br#","receipt":"#);
            let _ = serde_json::to_writer(&mut *body, task.receipt.as_ref());
            body.push(b'}');
        }
        if batched {
            body.extend_from_slice(b"]}");
        }
        self.endpoint.post_into(request, "/finish", body);
    }
}

/// The `data` of a pop with `count`: the tasks, of which only the id and receipt are read.
#[derive(Deserialize)]
struct PopAnswer<'a> {
    #[serde(borrow, default)]
    data: Option<Vec<Popped<'a>>>,
}

/// The task a `next` worker holds until its next pop finishes it.
struct Held {
    id: String,
    receipt: String,
}

#[derive(Deserialize)]
struct Popped<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    receipt: Cow<'a, str>,
}

/// The `data` of a batched finish: only the codes are read.
#[derive(Deserialize)]
struct FinishAnswer {
    data: FinishItems,
}

#[derive(Deserialize)]
struct FinishItems {
    items: Vec<ItemCode>,
}

#[derive(Deserialize)]
struct ItemCode {
    code: u16,
}

/// Adds the ready tasks in batches, a few requests in flight.
async fn prefill(
    client: &Client,
    topic: &str,
    bench: &PopBench,
) -> Result<BenchResult, BenchError> {
    let body = "x".repeat(bench.body_bytes);
    let batch = bench.prefill_batch as u64;
    let batches = bench.tasks.div_ceil(batch);
    let start = Instant::now();
    let mut handles = Vec::new();
    for lane in 0..PREFILL_CONCURRENCY.min(batches) {
        let (client, topic, body) = (client.clone(), topic.to_owned(), body.clone());
        let total = bench.tasks;
        handles.push(tokio::spawn(async move {
            let mut latency = super::histogram();
            let mut added = 0u64;
            let mut b = lane;
            while b < batches {
                let first = b * batch;
                let tasks: Vec<NewTask> = (first..(first + batch).min(total))
                    .map(|i| NewTask::new(topic.as_str(), format!("t{i}")).body(body.as_str()))
                    .collect();
                let sent = Instant::now();
                let items = client.add_batch(&tasks).await?;
                latency.saturating_record(micros(sent.elapsed()));
                added += items.iter().filter(|item| item.is_ok()).count() as u64;
                b += PREFILL_CONCURRENCY;
            }
            Ok::<_, ClientError>((added, latency))
        }));
    }
    let mut added = 0;
    let mut latency = super::histogram();
    for handle in handles {
        let (n, h) = handle.await.map_err(|err| BenchError::Bench {
            bench: "pop",
            reason: format!("a pre-fill task failed: {err}"),
        })??;
        added += n;
        latency.add(&h).ok();
    }
    if added < bench.tasks {
        return Err(BenchError::Bench {
            bench: "pop",
            reason: format!(
                "the server accepted only {added} of {} pre-fill tasks",
                bench.tasks
            ),
        });
    }
    let rate = added as f64 / start.elapsed().as_secs_f64().max(1e-9);
    let measured = format!(
        "pre-fill: POST /add with {} tasks per request, {PREFILL_CONCURRENCY} in flight",
        bench.prefill_batch
    );
    let mut result = BenchResult::new("pop (pre-fill)", measured, rate, "tasks/s", None);
    result.latency_ms = Some(Percentiles::from_micros(&latency));
    result.latency_of = "batch request";
    result.ops = added;
    Ok(result)
}

/// Waits until the server counts every pre-filled task ready; returns how long that took.
async fn wait_ready(client: &Client, topic: &str, tasks: u64) -> Result<u64, BenchError> {
    let start = Instant::now();
    loop {
        let stats = client.stats(topic).await?;
        if stats.ready >= tasks {
            return Ok(u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX));
        }
        if start.elapsed() > READY_WAIT {
            return Err(BenchError::Bench {
                bench: "pop",
                reason: format!(
                    "only {} of {tasks} pre-filled tasks were ready after {}s",
                    stats.ready,
                    READY_WAIT.as_secs()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One worker: pops and finishes over its own connection until `total` tasks are done (by
/// every worker) or the deadline.
async fn worker(
    requests: Requests,
    addr: std::net::SocketAddr,
    kind: Kind,
    total: u64,
    (done, taken): (Arc<AtomicU64>, Arc<AtomicU64>),
    deadline: Instant,
) -> LoadRun {
    let mut conn = match load::open(addr).await {
        Ok(conn) => conn,
        Err(failed) => return failed,
    };
    if kind == Kind::Next {
        return next_worker(&requests, &mut conn, total, (&done, &taken), deadline).await;
    }
    let batched = kind == Kind::Batch;
    let mut run = LoadRun::new();
    let (mut finish, mut body) = (Vec::new(), Vec::new());
    while done.load(Ordering::Relaxed) < total && Instant::now() < deadline {
        let sent = Instant::now();
        let tasks = match conn.exchange(&requests.pop).await {
            Ok(answer) if answer.status == 200 => {
                match serde_json::from_slice::<PopAnswer>(answer.body) {
                    Ok(PopAnswer { data: Some(tasks) }) if !tasks.is_empty() => {
                        requests.finish_into(&mut finish, &mut body, &tasks, batched);
                        tasks.len() as u64
                    }
                    // An empty answer is a long-poll that timed out near the end, not a latency.
                    Ok(_) => continue,
                    Err(err) => {
                        run.error(|| format!("unreadable pop answer: {err}"), false);
                        continue;
                    }
                }
            }
            Ok(answer) => {
                run.refused(answer.status, answer.body);
                continue;
            }
            Err(err) => {
                if run.http_error(err) {
                    break;
                }
                continue;
            }
        };
        run.record(sent);
        let sent = Instant::now();
        match conn.exchange(&finish).await {
            Ok(answer) if answer.status == 200 => {
                let ok = finished(&mut run, answer.body, batched, tasks);
                run.record(sent);
                run.tasks += ok;
                done.fetch_add(ok, Ordering::Relaxed);
            }
            Ok(answer) => run.refused(answer.status, answer.body),
            Err(err) => {
                if run.http_error(err) {
                    break;
                }
            }
        }
    }
    run
}

/// A `next` worker: each pop carries the finish of the task popped before, until every task
/// was handed out (by every worker's pops) or the deadline; the task held then is finished by
/// a `/finish` of its own, so the run's end is not a long-poll that waits for no task.
async fn next_worker(
    requests: &Requests,
    conn: &mut Conn,
    total: u64,
    (done, taken): (&AtomicU64, &AtomicU64),
    deadline: Instant,
) -> LoadRun {
    let mut run = LoadRun::new();
    let (mut request, mut body) = (Vec::new(), Vec::new());
    let mut held: Option<Held> = None;
    while taken.load(Ordering::Relaxed) < total && Instant::now() < deadline {
        let sent = Instant::now();
        let pop = match &held {
            Some(task) => {
                requests.pop_after_into(&mut request, &mut body, task);
                &request
            }
            None => &requests.pop,
        };
        match conn.exchange(pop).await {
            Ok(answer) if answer.status == 200 => {
                if held.take().is_some() {
                    run.tasks += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                match serde_json::from_slice::<PopAnswer>(answer.body) {
                    Ok(PopAnswer { data: Some(tasks) }) => {
                        held = tasks.first().map(|t| Held {
                            id: t.id.clone().into_owned(),
                            receipt: t.receipt.clone().into_owned(),
                        });
                        taken.fetch_add(held.is_some() as u64, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(err) => {
                        run.error(|| format!("unreadable pop answer: {err}"), false);
                    }
                }
                run.record(sent);
            }
            Ok(answer) => {
                // The finish was refused: nothing was popped, and the task is not held.
                held = None;
                run.refused(answer.status, answer.body);
            }
            Err(err) => {
                if run.http_error(err) {
                    return run;
                }
            }
        }
    }
    if let Some(task) = held {
        let popped = [Popped {
            id: Cow::Owned(task.id),
            receipt: Cow::Owned(task.receipt),
        }];
        requests.finish_into(&mut request, &mut body, &popped, false);
        if let Ok(answer) = conn.exchange(&request).await
            && answer.status == 200
        {
            run.tasks += 1;
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    run
}

/// How many of the `tasks` popped a 200 answer to their finish (`body`) finished: all of them
/// for one task a pop, those with code 0 for a batched finish; the others count as errors.
fn finished(run: &mut LoadRun, body: &[u8], batched: bool, tasks: u64) -> u64 {
    let ok = if batched {
        match serde_json::from_slice::<FinishAnswer>(body) {
            Ok(a) => a.data.items.iter().filter(|i| i.code == 0).count() as u64,
            Err(err) => {
                run.error(|| format!("unreadable finish answer: {err}"), false);
                0
            }
        }
    } else {
        tasks
    };
    if ok < tasks {
        let refused = tasks - ok;
        run.error(
            || format!("{refused} tasks of a batched finish refused"),
            false,
        );
        run.errors += refused - 1;
    }
    ok
}

/// A duration in whole microseconds, at least 1 (the histogram's lowest value).
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finishes_are_written_from_the_pop_answer() {
        let end = Endpoint::new("127.0.0.1:9280".parse().unwrap(), None, "/");
        let requests = Requests::new(&end, "bench-pop-x", 2, POP_TIMEOUT_MS);
        let pop = String::from_utf8(requests.pop.clone()).unwrap();
        assert!(
            pop.ends_with(r#"{"topic":"bench-pop-x","count":2,"timeout_ms":200}"#),
            "{pop}"
        );
        let answer = br#"{"code":0,"message":"ok","data":[
            {"id":"t1","topic":"bench-pop-x","body":"x","retries":0,"receipt":"r-1","due_ms":1,"ttr_ms":30000},
            {"id":"t\"2","topic":"bench-pop-x","body":"x","retries":0,"receipt":"r-2","due_ms":1,"ttr_ms":30000}]}"#;
        let tasks = serde_json::from_slice::<PopAnswer>(answer)
            .unwrap()
            .data
            .unwrap();
        let (mut request, mut body) = (Vec::new(), Vec::new());
        requests.finish_into(&mut request, &mut body, &tasks, true);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"tasks": [
                {"topic": "bench-pop-x", "id": "t1", "receipt": "r-1"},
                {"topic": "bench-pop-x", "id": "t\"2", "receipt": "r-2"},
            ]})
        );
        requests.finish_into(&mut request, &mut body, &tasks[..1], false);
        let text = String::from_utf8(request).unwrap();
        assert!(
            text.ends_with(r#"{"topic":"bench-pop-x","id":"t1","receipt":"r-1"}"#),
            "{text}"
        );
        let empty: PopAnswer =
            serde_json::from_slice(br#"{"code":0,"message":"ok","data":[]}"#).unwrap();
        assert!(empty.data.unwrap().is_empty());
    }
}
