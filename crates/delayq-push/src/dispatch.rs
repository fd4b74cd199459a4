//! The dispatcher: the handle ([`Push`]) that stores targets and runs one loop per topic
//! with a target, and the calls themselves.
//!
//! A topic loop waits for a free slot of its topic's semaphore (then takes every other free
//! one), takes as many tokens of its bucket, pops that many tasks with a long-poll, and
//! spawns one call per task; each call also holds a permit of the global cap until its
//! outcome is recorded (the topic's slot is given back as soon as the target answered). So a
//! topic never has more than its concurrency of calls in flight, all topics together never
//! more than the global cap of tasks held, and a loop that waits (for a slot, a token or a
//! task) waits alone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{Delivery, ErrorKind, PopOptions, Queue, ReleaseOptions, State, TraceContext};
use parking_lot::Mutex;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::{JoinHandle, JoinSet};

use crate::META_NAMESPACE;
use crate::allow::{AllowList, AllowResolver};
use crate::rules::{self, CallResult, TokenBucket, Verdict};
use crate::stats::{PushStats, StatsRegistry, TopicCounters};
use crate::target::PushTarget;

/// How long a topic loop waits after its pop failed (storage unavailable) before it tries
/// again.
const POP_RETRY_MS: u64 = 1_000;
/// How long a topic loop waits before it looks again when pops cannot long-poll.
const EMPTY_POLL_MS: u64 = 20;

/// How the dispatcher runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PushOptions {
    /// Where calls may go (default: anywhere).
    pub allow: AllowList,
    /// A PEM file of CA certificates trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Most calls in flight over all topics (default 256).
    pub max_in_flight: usize,
    /// How often the target list is read again from storage even without a change notice
    /// (default 30 s). A change made through any instance reaches this one at once as a
    /// notice of the settings store (in Redis mode over the events channel); this read is the
    /// safety net for a notice that was lost.
    pub reload_ms: u64,
    /// The long-poll of a topic loop's pop (default 30 s, as an HTTP pop's): a ready task
    /// wakes it at once, so this only bounds how often an idle topic asks the storage.
    pub poll_ms: u64,
    /// Most idle connections kept per target host (default: as many as calls may be in
    /// flight, so a busy target's connections are reused rather than reopened).
    pub max_idle_per_host: usize,
}

impl Default for PushOptions {
    fn default() -> Self {
        PushOptions {
            allow: AllowList::any(),
            ca_file: None,
            max_in_flight: 256,
            reload_ms: 30_000,
            poll_ms: 30_000,
            max_idle_per_host: 256,
        }
    }
}

impl PushOptions {
    /// Sets where calls may go.
    pub fn allow(mut self, allow: AllowList) -> Self {
        self.allow = allow;
        self
    }

    /// Trusts the CA certificates of this PEM file besides the system's.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Sets the global cap on calls in flight (at least 1), and the idle connections kept
    /// per host with it.
    pub fn max_in_flight(mut self, n: usize) -> Self {
        self.max_in_flight = n.max(1);
        self.max_idle_per_host = self.max_in_flight;
        self
    }

    /// Sets how often the target list is read again (at least 10 ms).
    pub fn reload_ms(mut self, ms: u64) -> Self {
        self.reload_ms = ms.max(10);
        self
    }
}

/// Why the dispatcher cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PushError {
    /// The CA file cannot be read or holds no certificate.
    #[error("push CA file {path}: {reason}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The HTTP client cannot be built.
    #[error("building the push HTTP client: {0}")]
    Client(String),
}

/// What every topic loop and push call works with: the queue, the HTTP client and its allow
/// list, the global cap on calls, the figures and the options.
struct CallContext {
    queue: Queue,
    client: reqwest::Client,
    allow: Arc<AllowList>,
    global: Arc<Semaphore>,
    stats: StatsRegistry,
    options: PushOptions,
    /// The start of the monotonic milliseconds the token buckets count.
    epoch: Instant,
}

/// One topic's running loop.
struct Running {
    target: Arc<PushTarget>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

struct Inner {
    shared: Arc<CallContext>,
    loops: Mutex<BTreeMap<String, Running>>,
    /// Serializes reloads, so two never start loops for one topic.
    reloading: tokio::sync::Mutex<()>,
    stop: watch::Sender<bool>,
    reloader: Mutex<Option<JoinHandle<()>>>,
}

/// The push dispatcher of one instance, and the store of targets. Cheap to clone.
#[derive(Clone)]
pub struct Push {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push")
            .field("options", &self.inner.shared.options)
            .finish_non_exhaustive()
    }
}

impl Push {
    /// A dispatcher over `queue`. Nothing is delivered until [`Push::start`].
    pub fn new(queue: Queue, options: PushOptions) -> Result<Push, PushError> {
        let allow = Arc::new(options.allow.clone());
        let client = build_client(&options, Arc::clone(&allow))?;
        let shared = Arc::new(CallContext {
            queue,
            client,
            allow,
            global: Arc::new(Semaphore::new(options.max_in_flight)),
            stats: StatsRegistry::default(),
            options,
            epoch: Instant::now(),
        });
        Ok(Push {
            inner: Arc::new(Inner {
                shared,
                loops: Mutex::new(BTreeMap::new()),
                reloading: tokio::sync::Mutex::new(()),
                stop: watch::Sender::new(false),
                reloader: Mutex::new(None),
            }),
        })
    }

    /// Reads the targets and starts delivering; from then on reads them again whenever the
    /// settings store says they changed (through any instance), and every `reload_ms`. Must
    /// be called inside a tokio runtime.
    pub async fn start(&self) {
        let mut changes = self.queue().context().settings.subscribe(META_NAMESPACE);
        if let Err(e) = self.reload().await {
            tracing::warn!(error = %e, "push: cannot read the targets yet; trying again");
        }
        let this = self.clone();
        let mut stop = self.inner.stop.subscribe();
        let every = Duration::from_millis(self.inner.shared.options.reload_ms);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    Ok(()) = changes.changed() => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
                if let Err(e) = this.reload().await {
                    tracing::warn!(error = %e, "push: cannot read the targets; keeping the current ones");
                }
            }
        });
        *self.inner.reloader.lock() = Some(task);
    }

    /// Validates and stores `target` (replacing the topic's previous one), and applies it on
    /// this instance at once (others when the change notice reaches them, at the latest within
    /// `reload_ms`). An invalid field is an
    /// [`ErrorKind::Invalid`] error naming it.
    pub async fn set(&self, target: PushTarget) -> delayq::Result<()> {
        crate::target::validate(&target)?;
        let value = serde_json::to_vec(&target).expect("a target always serializes");
        self.queue()
            .settings()
            .put(META_NAMESPACE, &target.topic, value)
            .await?;
        self.reload_if_started().await
    }

    /// The topic's target, if it has one.
    pub async fn get(&self, topic: &str) -> delayq::Result<Option<PushTarget>> {
        delayq::core::validate::check_topic(topic)?;
        Ok(self.list().await?.into_iter().find(|t| t.topic == topic))
    }

    /// Every stored target, by topic.
    pub async fn list(&self) -> delayq::Result<Vec<PushTarget>> {
        let stored = self.queue().settings().list(META_NAMESPACE).await?;
        let mut targets: Vec<PushTarget> = stored
            .into_iter()
            .filter_map(|(topic, value)| match serde_json::from_slice(&value) {
                Ok(t) => Some(t),
                Err(e) => {
                    tracing::error!(%topic, error = %e, "push: a stored target cannot be read; skipped");
                    None
                }
            })
            .collect();
        targets.sort_by(|a, b| a.topic.cmp(&b.topic));
        Ok(targets)
    }

    /// Removes the topic's target; its tasks then wait for ordinary consumers. Returns
    /// whether there was one. Calls in flight finish.
    pub async fn delete(&self, topic: &str) -> delayq::Result<bool> {
        delayq::core::validate::check_topic(topic)?;
        let existed = self
            .queue()
            .settings()
            .delete(META_NAMESPACE, topic)
            .await?;
        self.reload_if_started().await?;
        Ok(existed)
    }

    /// Whether this instance delivers `topic` (it had a target at the last reload).
    pub fn has_target(&self, topic: &str) -> bool {
        self.inner.loops.lock().contains_key(topic)
    }

    /// The push figures of `topic` on this instance, if it ever had a target here.
    pub fn stats(&self, topic: &str) -> Option<PushStats> {
        self.inner.shared.stats.get(topic)
    }

    /// The push figures of every topic that had a target on this instance.
    pub fn all_stats(&self) -> Vec<(String, PushStats)> {
        self.inner.shared.stats.all()
    }

    /// Stops delivering: no more pops, and calls in flight get up to `grace` to end (their
    /// result is applied); calls still running then are dropped, and their tasks come back
    /// after their ttr.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.stop.send_replace(true);
        let reloader = self.inner.reloader.lock().take();
        if let Some(task) = reloader {
            let _ = task.await;
        }
        let _guard = self.inner.reloading.lock().await;
        let loops = std::mem::take(&mut *self.inner.loops.lock());
        let deadline = tokio::time::Instant::now() + grace;
        for running in loops.values() {
            running.stop.send_replace(true);
        }
        for (topic, running) in loops {
            let abort = running.task.abort_handle();
            if tokio::time::timeout_at(deadline, running.task)
                .await
                .is_err()
            {
                tracing::warn!(%topic, "push: calls still in flight at shutdown; their tasks come back after their ttr");
                abort.abort();
            }
        }
    }

    fn queue(&self) -> &Queue {
        &self.inner.shared.queue
    }

    async fn reload_if_started(&self) -> delayq::Result<()> {
        if self.inner.reloader.lock().is_some() {
            self.reload().await?;
        }
        Ok(())
    }

    /// Reads the targets and makes the running loops match: a new target starts a loop, a
    /// changed one restarts it (calls in flight under the old settings finish), a removed
    /// one stops it.
    async fn reload(&self) -> delayq::Result<()> {
        let _guard = self.inner.reloading.lock().await;
        if *self.inner.stop.borrow() {
            return Ok(());
        }
        let wanted: BTreeMap<String, PushTarget> = self
            .list()
            .await?
            .into_iter()
            .map(|t| (t.topic.clone(), t))
            .collect();
        let mut loops = self.inner.loops.lock();
        loops.retain(|topic, running| {
            let keep = wanted.get(topic) == Some(&*running.target);
            if !keep {
                running.stop.send_replace(true);
                tracing::info!(%topic, "push: target removed or changed; its loop stops");
            }
            keep
        });
        for (topic, target) in wanted {
            if loops.contains_key(&topic) {
                continue;
            }
            let target = Arc::new(target);
            let (stop, stop_rx) = watch::channel(false);
            let task = tokio::spawn(run_topic(
                Arc::clone(&self.inner.shared),
                Arc::clone(&target),
                stop_rx,
            ));
            tracing::info!(%topic, url = %target.url, "push: delivering");
            loops.insert(topic, Running { target, stop, task });
        }
        Ok(())
    }
}

fn build_client(
    options: &PushOptions,
    allow: Arc<AllowList>,
) -> Result<reqwest::Client, PushError> {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .dns_resolver(Arc::new(AllowResolver { allow }))
        .pool_max_idle_per_host(options.max_idle_per_host)
        .pool_idle_timeout(Duration::from_secs(30))
        .connect_timeout(Duration::from_secs(10))
        // A redirect is an answer like any other non-2xx: following it could leave the
        // target's host.
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .user_agent(concat!("delayq-push/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = &options.ca_file {
        let refuse = |reason: String| PushError::CaFile {
            path: path.clone(),
            reason,
        };
        let pem = std::fs::read(path).map_err(|e| refuse(e.to_string()))?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| refuse(e.to_string()))?;
        if certs.is_empty() {
            return Err(refuse("holds no PEM certificate".into()));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| PushError::Client(e.to_string()))
}

/// The loop of one topic; see the module doc.
async fn run_topic(shared: Arc<CallContext>, target: Arc<PushTarget>, stop: watch::Receiver<bool>) {
    let counters = shared.stats.topic(&target.topic);
    let mut topic = TopicLoop::new(shared, target, stop);
    let mut calls = JoinSet::new();
    while let Some(permits) = topic.slots().await {
        let Some(deliveries) = topic.pop(permits.len()).await else {
            break;
        };
        for (delivery, permit) in deliveries.into_iter().zip(permits) {
            calls.spawn(deliver(
                Arc::clone(&topic.shared),
                Arc::clone(&topic.target),
                Arc::clone(&counters),
                delivery,
                permit,
            ));
        }
        // Reap ended calls so the set stays as small as the concurrency.
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}

/// The state of one topic's loop. Every wait is `biased` towards the stop: a stopped loop
/// (its target removed) must not take one more task just because a task was ready at the
/// same moment. Each step answers `None` once the loop is to stop.
struct TopicLoop {
    shared: Arc<CallContext>,
    target: Arc<PushTarget>,
    /// The target's concurrency.
    slots: Arc<Semaphore>,
    /// The target's rate, if it has one.
    bucket: Option<TokenBucket>,
    stop: watch::Receiver<bool>,
    /// The most tasks one pop asks for.
    max_count: usize,
    /// How long one pop waits for a task.
    poll_ms: u64,
}

impl TopicLoop {
    fn new(shared: Arc<CallContext>, target: Arc<PushTarget>, stop: watch::Receiver<bool>) -> Self {
        // The pops stay within the queue's limits, whatever they are set to.
        let limits = &shared.queue.context().limits;
        let max_count = limits.max_pop_count.max(1);
        let poll_ms = shared.options.poll_ms.min(limits.max_pop_timeout_ms);
        let now_ms = shared.epoch.elapsed().as_millis() as u64;
        let bucket = target
            .rate_per_s
            .zip(target.effective_burst())
            .map(|(rate, burst)| TokenBucket::new(rate, burst, now_ms));
        TopicLoop {
            slots: Arc::new(Semaphore::new(target.concurrency as usize)),
            shared,
            target,
            bucket,
            stop,
            max_count,
            poll_ms,
        }
    }

    /// Waits for a free slot, takes every other free one up to a pop's worth, then as many
    /// of them as the rate allows (waiting for the first token).
    async fn slots(&mut self) -> Option<Vec<OwnedSemaphorePermit>> {
        if *self.stop.borrow() {
            return None;
        }
        let first = tokio::select! {
            biased;
            _ = self.stop.wait_for(|s| *s) => return None,
            p = Arc::clone(&self.slots).acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let mut permits = vec![first];
        while permits.len() < self.max_count
            && let Ok(p) = Arc::clone(&self.slots).try_acquire_owned()
        {
            permits.push(p);
        }
        loop {
            let now_ms = self.shared.epoch.elapsed().as_millis() as u64;
            let Some(bucket) = self.bucket.as_mut() else {
                break;
            };
            match bucket.take(now_ms, permits.len() as u32) {
                Ok(n) => {
                    permits.truncate(n as usize);
                    break;
                }
                Err(wait_ms) => {
                    if self.pause(wait_ms).await {
                        return None;
                    }
                }
            }
        }
        Some(permits)
    }

    /// Pops up to `asked` tasks; the tokens of those not popped go back to the rate. After a
    /// failed pop, waits a second and answers no task.
    async fn pop(&mut self, asked: usize) -> Option<Vec<Delivery>> {
        let topic = &self.target.topic;
        let pop = self.shared.queue.pop(
            topic,
            PopOptions::default().count(asked).timeout_ms(self.poll_ms),
        );
        let popped = tokio::select! {
            biased;
            _ = self.stop.wait_for(|s| *s) => return None,
            r = pop => r,
        };
        let deliveries = match popped {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::ShuttingDown => return None,
            Err(e) => {
                tracing::warn!(%topic, error = %e, "push: cannot pop; trying again in 1 s");
                self.refund(asked);
                return (!self.pause(POP_RETRY_MS).await).then(Vec::new);
            }
        };
        self.refund(asked - deliveries.len());
        // Long-polls are off (max_pop_timeout_ms = 0): look again a little later, not in a
        // tight loop.
        if deliveries.is_empty() && self.poll_ms == 0 && self.pause(EMPTY_POLL_MS).await {
            return None;
        }
        Some(deliveries)
    }

    /// Gives `n` unused tokens back to the rate.
    fn refund(&mut self, n: usize) {
        if let Some(bucket) = self.bucket.as_mut() {
            bucket.refund(n as u32);
        }
    }

    /// Sleeps `ms`; whether the loop was stopped meanwhile.
    async fn pause(&mut self, ms: u64) -> bool {
        tokio::select! {
            biased;
            _ = self.stop.wait_for(|s| *s) => true,
            () = tokio::time::sleep(Duration::from_millis(ms)) => false,
        }
    }
}

/// One call and what follows from it: finish or release with the attempt's receipt.
async fn deliver(
    shared: Arc<CallContext>,
    target: Arc<PushTarget>,
    counters: Arc<TopicCounters>,
    delivery: Delivery,
    slot: OwnedSemaphorePermit,
) {
    let Ok(_global) = Arc::clone(&shared.global).acquire_owned().await else {
        return;
    };
    let timeout_ms = target
        .timeout_ms
        .unwrap_or_else(|| rules::default_timeout_ms(delivery.ttr_ms));
    counters.call_started();
    let started = Instant::now();
    let clock = &shared.queue.context().clock;
    // A traced task's attempt is a client span; the target continues the trace from it.
    let span = shared
        .queue
        .context()
        .metrics
        .spans()
        .push(&delivery, &target.url, clock.now_ms());
    let trace = span.as_ref().and_then(|s| s.context()).cloned();
    let result = call(&shared, &target, &delivery, trace.as_ref(), timeout_ms).await;
    let latency_ms = started.elapsed().as_millis() as u64;
    // The topic's concurrency bounds calls to its target; recording the outcome is the
    // storage's work, so the next call may start meanwhile (the global permit is held until
    // the outcome is recorded, which bounds the tasks held in all).
    drop(slot);
    let verdict = rules::verdict(&result, shared.queue.context().limits.max_delay_ms);
    let (topic, id, receipt) = (&delivery.topic, &delivery.id, delivery.receipt.clone());
    let status = match &result {
        CallResult::Answered { status, .. } => Some(*status),
        _ => None,
    };
    let failure = match &verdict {
        Verdict::Finish => None,
        Verdict::Release { error, .. } => Some(error.clone()),
    };
    // The finish or release is a child of the attempt's span.
    let applied = delayq::spans::within(trace.as_ref(), async {
        match verdict {
            Verdict::Finish => {
                counters.call_ended(None, latency_ms);
                shared
                    .queue
                    .finish(topic, id, Some(&receipt))
                    .await
                    .map(|()| State::Finished)
            }
            Verdict::Release {
                class,
                error,
                delay_ms,
            } => {
                counters.call_ended(Some(class), latency_ms);
                tracing::debug!(%topic, %id, %error, "push: delivery failed");
                let mut options = ReleaseOptions::default().receipt(receipt).error(error);
                if let Some(delay) = delay_ms {
                    options = options.delay_ms(delay);
                }
                shared.queue.release(topic, id, options).await
            }
        }
    })
    .await;
    if let Some(span) = span {
        let outcome = match &applied {
            Ok(state) => state.name(),
            Err(e) => e.kind().name(),
        };
        span.end(clock.now_ms(), status, outcome, failure.as_deref());
    }
    if let Err(e) = applied {
        // Typically the call outlived the ttr: the task was redelivered and this receipt is
        // stale.
        tracing::warn!(%topic, %id, error = %e, "push: the call's result was not applied");
    }
}

/// POSTs the task to the target, the whole exchange (connect, send, the answer up to its
/// bound) under `timeout_ms`.
async fn call(
    shared: &CallContext,
    target: &PushTarget,
    d: &Delivery,
    trace: Option<&TraceContext>,
    timeout_ms: u64,
) -> CallResult {
    let url = match reqwest::Url::parse(&target.url) {
        Ok(url) => url,
        Err(e) => {
            return CallResult::Connect {
                reason: format!("bad url: {e}"),
            };
        }
    };
    if let Some(refused) = refused_literal(&shared.allow, &url) {
        return refused;
    }
    let now_ms = shared.queue.context().clock.now_ms();
    let request = shared
        .client
        .post(url)
        .headers(headers(target, d, trace.or(d.trace.as_ref()), now_ms))
        .body(d.body.clone());
    let exchange =
        async { Ok::<_, reqwest::Error>(read_answer(request.send().await?, now_ms).await) };
    match tokio::time::timeout(Duration::from_millis(timeout_ms), exchange).await {
        Err(_) => CallResult::TimedOut {
            after_ms: timeout_ms,
        },
        Ok(Ok(result)) => result,
        Ok(Err(e)) if e.is_timeout() => CallResult::TimedOut {
            after_ms: timeout_ms,
        },
        Ok(Err(e)) => CallResult::Connect {
            reason: error_chain(&e),
        },
    }
}

/// A call to an address written in the URL that `push_allow` does not allow. (A host name
/// is checked when it is resolved; an address written in the URL is not resolved.)
fn refused_literal(allow: &AllowList, url: &reqwest::Url) -> Option<CallResult> {
    let ip = match url.host()? {
        url::Host::Ipv4(ip) => std::net::IpAddr::V4(ip),
        url::Host::Ipv6(ip) => std::net::IpAddr::V6(ip),
        url::Host::Domain(_) => return None,
    };
    (!allow.allows(&ip.to_string(), ip)).then(|| CallResult::Connect {
        reason: format!("{ip} is not allowed by push_allow"),
    })
}

/// The headers of a call: the target's own, then the delivery's (`Delayq-*`, which a target
/// may not set, and the W3C `traceparent`/`tracestate` of `trace`, which replace the
/// target's), signed when the target has a secret. `trace` is the attempt's span when
/// delayq exports spans, else the task's own context.
fn headers(
    target: &PushTarget,
    d: &Delivery,
    trace: Option<&TraceContext>,
    now_ms: u64,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    for (name, value) in &target.headers {
        // Checked when the target was stored.
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            headers.insert(n, v);
        }
    }
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    };
    put("delayq-topic", d.topic.clone());
    put("delayq-id", d.id.clone());
    put("delayq-attempt", (u64::from(d.retries) + 1).to_string());
    put("delayq-due-ms", d.due_ms.to_string());
    if let Some(trace) = trace {
        put("traceparent", trace.traceparent().to_owned());
        if let Some(state) = trace.tracestate() {
            put("tracestate", state.to_owned());
        }
    }
    if let Some(secret) = &target.secret {
        put(
            "delayq-signature",
            rules::signature(secret.as_bytes(), now_ms, &d.body),
        );
    }
    headers
}

/// The status, `Retry-After` and the head of the answer, read up to its bound; a longer one
/// is dropped with its connection.
async fn read_answer(mut response: reqwest::Response, now_ms: u64) -> CallResult {
    let status = response.status().as_u16();
    let retry_after_ms = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| rules::parse_retry_after(v, now_ms));
    let mut head = Vec::new();
    let mut read = 0usize;
    while read < rules::READ_ANSWER_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                read += chunk.len();
                let room = rules::KEPT_ANSWER_BYTES.saturating_sub(head.len());
                head.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            // The status is what counts; a body cut short does not change it.
            Ok(None) | Err(_) => break,
        }
    }
    CallResult::Answered {
        status,
        head,
        retry_after_ms,
    }
}

/// An error with its causes, so "connection refused" is not hidden behind "error sending
/// request".
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}
