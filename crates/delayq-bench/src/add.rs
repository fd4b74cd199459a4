//! `delayq bench add`: adds per second from concurrent clients, against the ceiling.
//!
//! First the `/healthz` ceiling is measured with the same clients. Then each client loops for
//! `--duration`: it adds one task per request (or `--batch` tasks per request) and records the
//! request's latency. Tasks are due in `--delay` (default 1 h), so they stay scheduled and do
//! not disturb later benchmarks by firing. The figure is tasks acknowledged per second of the
//! run, and its ratio to the ceiling.
//!
//! The requests are serialized once per client; each request only rewrites the fixed-width
//! digits of its task ids in place (`c0007-000000000042`), so the loop allocates nothing.

use std::time::{Duration, Instant};

use clap::Args;
use serde::Deserialize;

use super::http::{Endpoint, write_digits};
use super::load::{self, LoadRun, run_clients};
use super::{
    BenchResult, Ctx, FULL, MAX_CONCURRENCY, MAX_DURATION_MS, MAX_TASKS, Percentiles, Target,
};
use crate::BenchError;
use crate::duration::{format_duration, parse_duration};

/// docs/design.md §6: HTTP /add with 50 concurrent clients, against the `/healthz` ceiling.
pub const TARGET: Target = Target {
    op: ">=",
    value: 90.0,
    unit: "% of the ceiling",
    condition: "50 clients, 1 task a request, embedded, fsync interval",
};

/// The flags of `delayq bench add`.
#[derive(Debug, Clone, Args)]
pub struct AddBench {
    /// Concurrent clients, each with its own keep-alive connection.
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// How long to add.
    #[arg(long, value_parser = parse_duration, default_value = "10s", value_name = "DURATION")]
    pub duration: u64,
    /// Tasks per request (1: one /add per task).
    #[arg(long, default_value_t = 1)]
    pub batch: usize,
    /// Bytes of body per task.
    #[arg(long, default_value_t = 100)]
    pub body_bytes: usize,
    /// How far in the future the tasks are due.
    #[arg(long, value_parser = parse_duration, default_value = "1h", value_name = "DURATION")]
    pub delay: u64,
    /// Stop after this many tasks even if the duration has not passed.
    #[arg(long, default_value_t = 10_000_000)]
    pub max_tasks: u64,
    /// Give every task this W3C trace context (`traceparent` field), to measure what carrying
    /// one costs (docs/tracing.md).
    #[arg(long, value_name = "TRACEPARENT")]
    pub traceparent: Option<String>,
}

impl Default for AddBench {
    fn default() -> Self {
        AddBench {
            clients: 50,
            duration: 10_000,
            batch: 1,
            body_bytes: 100,
            delay: 3_600_000,
            max_tasks: 10_000_000,
            traceparent: None,
        }
    }
}

impl AddBench {
    /// Checks the bounds of every setting.
    pub fn validate(&self) -> Result<AddBench, BenchError> {
        let check = |ok: bool, what: &str| super::require("add", ok, what);
        super::in_range("add", "--clients", self.clients, 1..=MAX_CONCURRENCY)?;
        check(
            (1..=MAX_DURATION_MS).contains(&self.duration),
            "--duration must be 1ms to 10m",
        )?;
        super::in_range("add", "--batch", self.batch, 1..=10_000)?;
        super::body_bytes("add", self.body_bytes)?;
        super::in_range("add", "--max-tasks", self.max_tasks, 1..=MAX_TASKS)?;
        if let Some(parent) = &self.traceparent {
            // Checked here so a typo is not measured as a run of refused adds; the checked
            // form is also safe to write into the JSON template as it is.
            let checked = delayq_client::TraceContext::parse(parent, None);
            check(
                checked.is_ok(),
                "--traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)",
            )?;
        }
        Ok(self.clone())
    }
}

/// The width of the client number in a task id.
const CLIENT_DIGITS: usize = 4;
/// The width of the sequence number in a task id.
const SEQ_DIGITS: usize = 12;

/// One client's request, serialized once: the bytes and where each task's id digits are.
#[derive(Debug, Clone)]
struct Template {
    bytes: Vec<u8>,
    /// The offset of each task's id (`c` + client digits + `-` + sequence digits).
    ids: Vec<usize>,
}

impl Template {
    /// `POST /add` of `batch` tasks of `topic` (one task unwrapped when `batch` is 1).
    fn new(
        endpoint: &Endpoint,
        topic: &str,
        body_bytes: usize,
        delay_ms: u64,
        batch: usize,
        traceparent: Option<&str>,
    ) -> Template {
        let trace = traceparent.map_or_else(String::new, |t| format!(",\"traceparent\":\"{t}\""));
        let filler = "x".repeat(body_bytes);
        let placeholder = format!("c{}-{}", "0".repeat(CLIENT_DIGITS), "0".repeat(SEQ_DIGITS));
        let mut body = String::new();
        let mut ids = Vec::with_capacity(batch);
        if batch > 1 {
            body.push_str("{\"tasks\":[");
        }
        for i in 0..batch {
            if i > 0 {
                body.push(',');
            }
            // Topic and filler are plain ASCII without quotes or backslashes: valid JSON text.
            body.push_str(&format!("{{\"topic\":\"{topic}\",\"id\":\""));
            ids.push(body.len());
            body.push_str(&format!(
                "{placeholder}\",\"body\":\"{filler}\",\"delay_ms\":{delay_ms}{trace}}}"
            ));
        }
        if batch > 1 {
            body.push_str("]}");
        }
        let bytes = endpoint.post("/add", body.as_bytes());
        let head = bytes.len() - body.len();
        Template {
            bytes,
            ids: ids.into_iter().map(|at| head + at).collect(),
        }
    }

    /// The request of client `n`, its tasks numbered from 0.
    fn for_client(&self, n: usize) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        for &at in &self.ids {
            write_digits(&mut bytes[at + 1..at + 1 + CLIENT_DIGITS], n as u64);
        }
        bytes
    }

    /// Numbers the tasks of `request` from `seq`.
    fn number(&self, request: &mut [u8], seq: u64) {
        for (i, &at) in self.ids.iter().enumerate() {
            let from = at + 2 + CLIENT_DIGITS;
            write_digits(&mut request[from..from + SEQ_DIGITS], seq + i as u64);
        }
    }
}

/// The `code` of each task of a batch answer.
#[derive(Deserialize)]
struct BatchAnswer {
    data: Vec<ItemCode>,
}

#[derive(Deserialize)]
struct ItemCode {
    code: u16,
}

/// Runs the benchmark.
pub async fn run(ctx: &mut Ctx, bench: &AddBench) -> Result<Vec<BenchResult>, BenchError> {
    let ceiling = ctx.ceiling(bench.clients, bench.duration).await?;
    let topic = format!("bench-add-{}", super::run_id());
    let template = Template::new(
        &ctx.endpoint,
        &topic,
        bench.body_bytes,
        bench.delay,
        bench.batch,
        bench.traceparent.as_deref(),
    );
    let per_client = bench.max_tasks.div_ceil(bench.clients as u64);
    let deadline = Instant::now() + Duration::from_millis(bench.duration);
    let (addr, batch) = (ctx.endpoint.addr, bench.batch);
    let (run, start) = run_clients("add", ctx.threads, bench.clients, move |n| {
        add_client(template.clone(), addr, n, batch, per_client, deadline)
    })
    .await?;
    let rate = run.rate("add", run.tasks, start)?;
    let measured = format!(
        "POST /add, {} clients, {} task{} per request, {} B body{}, for {}",
        bench.clients,
        bench.batch,
        if bench.batch == 1 { "" } else { "s" },
        bench.body_bytes,
        if bench.traceparent.is_some() {
            ", traced"
        } else {
            ""
        },
        format_duration(bench.duration)
    );
    let mut result = BenchResult::new("add", measured, rate, "tasks/s", Some(TARGET));
    result.latency_ms = Some(Percentiles::from_micros(&run.latency));
    result.latency_of = "request";
    result.ops = run.tasks;
    result.errors = run.errors;
    result.first_error = run.first_error;
    if bench.batch != 1 || bench.clients != 50 {
        result.not_comparable(format!(
            "the target is for 50 clients and one task per request; this run had {} clients \
             and {} per request",
            bench.clients, bench.batch
        ));
    }
    result.compare(&ceiling, &[FULL]);
    Ok(vec![result])
}

async fn add_client(
    template: Template,
    addr: std::net::SocketAddr,
    n: usize,
    batch: usize,
    max_tasks: u64,
    deadline: Instant,
) -> LoadRun {
    let mut conn = match load::open(addr).await {
        Ok(conn) => conn,
        Err(failed) => return failed,
    };
    let mut run = LoadRun::new();
    let mut request = template.for_client(n);
    let mut seq: u64 = 0;
    while Instant::now() < deadline && seq < max_tasks {
        template.number(&mut request, seq);
        seq += batch as u64;
        let sent = Instant::now();
        match conn.exchange(&request).await {
            Ok(answer) if answer.status == 200 => {
                run.record(sent);
                let ok = if batch == 1 {
                    1
                } else {
                    match serde_json::from_slice::<BatchAnswer>(answer.body) {
                        Ok(a) => a.data.iter().filter(|i| i.code == 0).count() as u64,
                        Err(err) => {
                            run.error(|| format!("unreadable batch answer: {err}"), false);
                            0
                        }
                    }
                };
                run.tasks += ok;
                if ok < batch as u64 {
                    let refused = batch as u64 - ok;
                    run.error(|| format!("{refused} tasks of a batch refused"), false);
                    run.errors += refused - 1;
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn ids_are_numbered_in_place() {
        let end = Endpoint::new("127.0.0.1:9280".parse().unwrap(), None, "/");
        for batch in [1, 3] {
            let t = Template::new(&end, "bench-add-x", 10, 3_600_000, batch, Some(PARENT));
            let mut request = t.for_client(7);
            t.number(&mut request, 41);
            let text = String::from_utf8(request.clone()).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(
                head.contains(&format!("Content-Length: {}", body.len())),
                "{head}"
            );
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            let tasks = if batch == 1 {
                vec![json]
            } else {
                json["tasks"].as_array().unwrap().clone()
            };
            let ids: Vec<&str> = tasks.iter().map(|t| t["id"].as_str().unwrap()).collect();
            let want: Vec<String> = (0..batch)
                .map(|i| format!("c0007-{:012}", 41 + i))
                .collect();
            assert_eq!(ids, want);
            assert_eq!(tasks[0]["body"], "x".repeat(10));
            assert_eq!(tasks[0]["delay_ms"], 3_600_000);
            assert_eq!(tasks[0]["topic"], "bench-add-x");
            assert_eq!(tasks[batch - 1]["traceparent"], PARENT);
        }
    }
}
