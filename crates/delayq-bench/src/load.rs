//! The load loops' machinery: clients spread over a few load threads, each thread with its own
//! current-thread runtime (as `wrk -t1` runs its connections on one thread), and what each
//! client counted, merged.
//!
//! Also the ceiling itself: `GET /healthz` with the same clients and threads as the figure it
//! is compared with.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::http::{Conn, Endpoint, HttpError};
use crate::BenchError;

/// What one client (or, merged, all of them) did.
#[derive(Debug)]
pub struct LoadRun {
    /// Request latency, microseconds.
    pub latency: Histogram<u64>,
    /// Requests answered with success.
    pub requests: u64,
    /// Tasks done (added, finished); for `/healthz`, the requests.
    pub tasks: u64,
    /// Requests or tasks refused or failed.
    pub errors: u64,
    /// The first error, in words.
    pub first_error: Option<String>,
    /// Whether a client stopped because the connection failed.
    pub broken: bool,
    /// When the last task was done.
    pub last_done: Instant,
}

impl Default for LoadRun {
    fn default() -> Self {
        LoadRun::new()
    }
}

impl LoadRun {
    /// Nothing done yet.
    pub fn new() -> LoadRun {
        LoadRun {
            latency: super::histogram(),
            requests: 0,
            tasks: 0,
            errors: 0,
            first_error: None,
            broken: false,
            last_done: Instant::now(),
        }
    }

    /// Records a request that took from `sent` to now.
    pub fn record(&mut self, sent: Instant) {
        let now = Instant::now();
        self.latency
            .saturating_record(super::pop::micros(now.duration_since(sent)));
        self.requests += 1;
        self.last_done = now;
    }

    /// Counts an error; a broken connection stops the client (returns true).
    pub fn error(&mut self, what: impl FnOnce() -> String, broken: bool) -> bool {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what());
        }
        self.broken |= broken;
        broken
    }

    /// Counts a failed exchange; returns true (stop) when the connection is gone.
    pub fn http_error(&mut self, err: HttpError) -> bool {
        let broken = !matches!(err, HttpError::Malformed(_));
        self.error(|| err.to_string(), broken)
    }

    /// Counts an answer other than 200: its status and the start of its body.
    pub fn refused(&mut self, status: u16, body: &[u8]) {
        self.error(
            || {
                let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
                format!("status {status}: {text}")
            },
            false,
        );
    }

    /// `done` tasks per second from `start` to the last one; an error when nothing was done
    /// because the connections failed.
    pub fn rate(&self, bench: &'static str, done: u64, start: Instant) -> Result<f64, BenchError> {
        if done == 0 && self.broken {
            return Err(BenchError::Bench {
                bench,
                reason: self
                    .first_error
                    .clone()
                    .unwrap_or_else(|| "the connections failed".into()),
            });
        }
        let elapsed = self.last_done.duration_since(start).as_secs_f64();
        Ok(done as f64 / elapsed.max(1e-9))
    }

    fn merge(&mut self, other: LoadRun) {
        self.latency.add(&other.latency).ok();
        self.requests += other.requests;
        self.tasks += other.tasks;
        self.errors += other.errors;
        self.first_error = self.first_error.take().or(other.first_error);
        self.broken |= other.broken;
        self.last_done = self.last_done.max(other.last_done);
    }
}

/// Runs `clients` clients spread over `threads` load threads, each thread on its own
/// current-thread runtime; `client(n)` is the loop of client `n`. Returns the merged counts
/// and when the clients started.
pub async fn run_clients<F, Fut>(
    bench: &'static str,
    threads: usize,
    clients: usize,
    client: F,
) -> Result<(LoadRun, Instant), BenchError>
where
    F: Fn(usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = LoadRun> + 'static,
{
    let threads = threads.clamp(1, clients.max(1));
    let start = Instant::now();
    let joined = tokio::task::spawn_blocking(move || {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let client = client.clone();
                std::thread::Builder::new()
                    .name(format!("bench-load-{t}"))
                    .spawn(move || load_thread(t, threads, clients, client))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|_| Err("a load thread panicked".to_owned())),
                Err(err) => Err(format!("cannot start a load thread: {err}")),
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|err| BenchError::Bench {
        bench,
        reason: format!("the load threads failed: {err}"),
    })?;
    let mut total = LoadRun::new();
    total.last_done = start;
    for run in joined {
        total.merge(run.map_err(|reason| BenchError::Bench { bench, reason })?);
    }
    Ok((total, start))
}

/// Opens a client's connection; when that fails, the run that reports it.
pub async fn open(addr: SocketAddr) -> Result<Conn, LoadRun> {
    Conn::connect(addr).await.map_err(|err| {
        let mut run = LoadRun::new();
        run.http_error(err);
        run
    })
}

/// The clients `t, t + threads, ...` on one current-thread runtime.
fn load_thread<F, Fut>(
    t: usize,
    threads: usize,
    clients: usize,
    client: F,
) -> Result<LoadRun, String>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = LoadRun> + 'static,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start a load runtime: {err}"))?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let handles: Vec<_> = (t..clients)
            .step_by(threads)
            .map(|n| tokio::task::spawn_local(client(n)))
            .collect();
        let mut total = LoadRun::new();
        for handle in handles {
            total.merge(
                handle
                    .await
                    .map_err(|err| format!("a load client failed: {err}"))?,
            );
        }
        Ok(total)
    })
}

/// The ceiling: `GET /healthz` from `clients` keep-alive clients on `threads` load threads
/// for `duration`. Returns the requests per second and the merged counts.
pub async fn ceiling(
    endpoint: &Endpoint,
    threads: usize,
    clients: usize,
    duration: Duration,
) -> Result<(f64, LoadRun), BenchError> {
    let request = endpoint.get("/healthz");
    let addr = endpoint.addr;
    let deadline = Instant::now() + duration;
    let (run, start) = run_clients("ceiling", threads, clients, move |_| {
        let request = request.clone();
        async move {
            let mut conn = match open(addr).await {
                Ok(conn) => conn,
                Err(failed) => return failed,
            };
            let mut run = LoadRun::new();
            while Instant::now() < deadline {
                let sent = Instant::now();
                match conn.exchange(&request).await {
                    Ok(answer) if answer.status == 200 => {
                        run.record(sent);
                        run.tasks += 1;
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
    })
    .await?;
    Ok((run.rate("ceiling", run.requests, start)?, run))
}
