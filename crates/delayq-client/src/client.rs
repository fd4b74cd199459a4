//! The [`Client`]: one method per operation of DESIGN §3.
//!
//! Each method builds its JSON body, sends it with the shared connection pool, reads the
//! `{"code", "message", "data"}` envelope and returns `data` as a core type. Failures become a
//! [`ClientError`] naming the operation and the URL. A `Client` is cheap to clone and meant to
//! be shared: all clones use one pool of keep-alive HTTP/1.1 connections.

use std::sync::Arc;
use std::time::Duration;

use delayq_core::{AddOutcome, Delivery, NewTask, Page, State, TaskInfo, TopicStats};
use reqwest::header::{AUTHORIZATION, HeaderValue};
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ClientError;
use crate::wire::{self, AddBody, BatchBody, Envelope, OneOrMany, PopBody, ReleaseBody, TaskRef};
use crate::{BatchItem, BatchItemError};

/// How long a request other than a long-poll may take by default.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take by default.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// What a pop waits for beyond its own long-poll timeout before the client gives up.
const POP_GRACE: Duration = Duration::from_secs(10);
/// The server's default long-poll timeout (DESIGN §3), used to size the request timeout when
/// the caller leaves `timeout_ms` to the server.
const SERVER_DEFAULT_POP_TIMEOUT_MS: u64 = 30_000;

/// Options of a [`Client`]. Build with [`ClientOptions::default`] and the setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClientOptions {
    /// How long a request (other than a long-poll pop) may take in all.
    pub request_timeout: Duration,
    /// How long connecting to the server may take.
    pub connect_timeout: Duration,
    /// How many idle keep-alive connections to keep per host.
    pub pool_max_idle_per_host: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            pool_max_idle_per_host: 1024,
        }
    }
}

impl ClientOptions {
    /// Sets how long a request (other than a long-poll pop) may take.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets how long connecting may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets how many idle connections the pool keeps per host.
    pub fn pool_max_idle_per_host(mut self, max: usize) -> Self {
        self.pool_max_idle_per_host = max;
        self
    }
}

/// Options of [`Client::pop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PopOptions {
    /// How long to wait for a ready task; `None` leaves it to the server (30 s).
    pub timeout_ms: Option<u64>,
    /// The most tasks to take at once.
    pub count: usize,
    /// Finish the tasks as they are handed out (at-most-once).
    pub auto_finish: bool,
}

impl Default for PopOptions {
    fn default() -> Self {
        PopOptions {
            timeout_ms: None,
            count: 1,
            auto_finish: false,
        }
    }
}

impl PopOptions {
    /// Sets the long-poll timeout.
    pub fn timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = Some(timeout_ms);
        self
    }

    /// Sets the most tasks to take at once.
    pub fn count(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// Sets whether the tasks are finished as they are handed out.
    pub fn auto_finish(mut self, auto_finish: bool) -> Self {
        self.auto_finish = auto_finish;
        self
    }
}

/// Options of [`Client::release`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseOptions {
    /// The receipt of the attempt being released.
    pub receipt: Option<String>,
    /// Wait this long before the task is ready again, instead of its backoff.
    pub delay_ms: Option<u64>,
    /// Why the attempt failed; kept in the task's history.
    pub error: Option<String>,
}

impl ReleaseOptions {
    /// Sets the receipt.
    pub fn receipt(mut self, receipt: impl Into<String>) -> Self {
        self.receipt = Some(receipt.into());
        self
    }

    /// Sets the delay before the task is ready again.
    pub fn delay_ms(mut self, delay_ms: u64) -> Self {
        self.delay_ms = Some(delay_ms);
        self
    }

    /// Sets the error text.
    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }
}

/// Which tasks [`Client::tasks`] lists.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListOptions {
    /// Only tasks in this state.
    pub state: Option<State>,
    /// The page number, from 1.
    pub page: u64,
    /// Tasks per page (the server allows at most 1000).
    pub page_size: u64,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions {
            state: None,
            page: 1,
            page_size: 100,
        }
    }
}

impl ListOptions {
    /// Lists only tasks in `state`.
    pub fn state(mut self, state: State) -> Self {
        self.state = Some(state);
        self
    }

    /// Sets the page number (from 1).
    pub fn page(mut self, page: u64) -> Self {
        self.page = page;
        self
    }

    /// Sets the page size.
    pub fn page_size(mut self, page_size: u64) -> Self {
        self.page_size = page_size;
        self
    }
}

/// A typed client of one delayq server.
///
/// Cloning is cheap; clones share one connection pool, so one client serves many concurrent
/// tasks.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The base URL, its path ending in `/` so that endpoints join under it.
    base: Url,
    /// `Bearer <token>`, marked sensitive so it never shows in debug output.
    auth: Option<HeaderValue>,
    request_timeout: Duration,
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:9280`), sending `token`
    /// as a bearer token when given.
    pub fn new(base_url: &str, token: Option<String>) -> Result<Client, ClientError> {
        Client::with_options(base_url, token, ClientOptions::default())
    }

    /// A client with explicit options.
    pub fn with_options(
        base_url: &str,
        token: Option<String>,
        options: ClientOptions,
    ) -> Result<Client, ClientError> {
        let base = parse_base_url(base_url)?;
        let auth = match token {
            Some(token) => {
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                        ClientError::InvalidUrl {
                            url: base_url.to_owned(),
                            reason: "the token contains characters not allowed in a header".into(),
                        }
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .pool_max_idle_per_host(options.pool_max_idle_per_host)
            .tcp_nodelay(true)
            .build()
            .map_err(|err| ClientError::InvalidUrl {
                url: base_url.to_owned(),
                reason: format!("cannot build the HTTP client: {err}"),
            })?;
        Ok(Client {
            http,
            inner: Arc::new(Inner {
                base,
                auth,
                request_timeout: options.request_timeout,
            }),
        })
    }

    /// The base URL of the server.
    pub fn base_url(&self) -> &Url {
        &self.inner.base
    }

    /// Adds one task. Returns whether it was added, replaced or existed already (per its
    /// `on_duplicate`).
    pub async fn add(&self, task: &NewTask) -> Result<AddOutcome, ClientError> {
        let op = "adding a task";
        let data: Option<serde_json::Value> = self
            .post(op, "add", &AddBody::from(task), self.inner.request_timeout)
            .await?;
        wire::outcome_of(data).map_err(|reason| self.protocol(op, "POST", "add", reason))
    }

    /// Adds a batch of tasks in one round trip (and one durable write on the server). Returns
    /// one result per task, in order; a refused task does not stop the others.
    pub async fn add_batch(&self, tasks: &[NewTask]) -> Result<Vec<BatchItem>, ClientError> {
        let op = "adding a batch of tasks";
        let body = BatchBody {
            tasks: tasks.iter().map(AddBody::from).collect(),
        };
        let data: Option<serde_json::Value> = self
            .post(op, "add", &body, self.inner.request_timeout)
            .await?;
        let items = wire::batch_results(data, tasks.len())
            .map_err(|reason| self.protocol(op, "POST", "add", reason))?;
        Ok(items)
    }

    /// Adds a batch given as raw JSON task objects (the `/add` body of one task each), as read
    /// from a JSON-lines file. The server validates each object.
    pub async fn add_batch_raw(
        &self,
        tasks: &[serde_json::Value],
    ) -> Result<Vec<BatchItem>, ClientError> {
        let op = "adding a batch of tasks";
        let body = serde_json::json!({ "tasks": tasks });
        let data: Option<serde_json::Value> = self
            .post(op, "add", &body, self.inner.request_timeout)
            .await?;
        wire::batch_results(data, tasks.len())
            .map_err(|reason| self.protocol(op, "POST", "add", reason))
    }

    /// Long-polls `topic` for up to `options.count` ready tasks. Returns an empty list when
    /// none became ready within the timeout.
    pub async fn pop(
        &self,
        topic: &str,
        options: PopOptions,
    ) -> Result<Vec<Delivery>, ClientError> {
        let wait = options.timeout_ms.unwrap_or(SERVER_DEFAULT_POP_TIMEOUT_MS);
        let body = PopBody {
            topic,
            timeout_ms: options.timeout_ms,
            count: options.count,
            auto_finish: options.auto_finish,
        };
        let data: Option<OneOrMany> = self
            .post(
                "popping tasks",
                "pop",
                &body,
                Duration::from_millis(wait) + POP_GRACE,
            )
            .await?;
        Ok(data.map(OneOrMany::into_vec).unwrap_or_default())
    }

    /// Confirms a popped task: ACTIVE → FINISHED.
    pub async fn finish(
        &self,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
    ) -> Result<(), ClientError> {
        let body = TaskRef { topic, id, receipt };
        self.post_ignoring_data("finishing a task", "finish", &body)
            .await
    }

    /// Gives a popped task back as failed: it is redelivered per its backoff (or `delay_ms`),
    /// or goes DEAD when out of retries.
    pub async fn release(
        &self,
        topic: &str,
        id: &str,
        options: &ReleaseOptions,
    ) -> Result<(), ClientError> {
        let body = ReleaseBody {
            topic,
            id,
            receipt: options.receipt.as_deref(),
            delay_ms: options.delay_ms,
            error: options.error.as_deref(),
        };
        self.post_ignoring_data("releasing a task", "release", &body)
            .await
    }

    /// Restarts the time to run of a popped task.
    pub async fn touch(
        &self,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
    ) -> Result<(), ClientError> {
        let body = TaskRef { topic, id, receipt };
        self.post_ignoring_data("touching a task", "touch", &body)
            .await
    }

    /// Cancels a task: it is never delivered again.
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<(), ClientError> {
        let body = TaskRef {
            topic,
            id,
            receipt: None,
        };
        self.post_ignoring_data("cancelling a task", "cancel", &body)
            .await
    }

    /// Makes a DEAD task READY again, its retries reset.
    pub async fn requeue(&self, topic: &str, id: &str) -> Result<(), ClientError> {
        let body = TaskRef {
            topic,
            id,
            receipt: None,
        };
        self.post_ignoring_data("requeueing a task", "requeue", &body)
            .await
    }

    /// Makes every DEAD task of `topic` READY again. Returns how many were requeued.
    pub async fn requeue_all(&self, topic: &str) -> Result<u64, ClientError> {
        let op = "requeueing the dead tasks of a topic";
        let body = wire::RequeueAllBody { topic, all: true };
        let data: Option<serde_json::Value> = self
            .post(op, "requeue", &body, self.inner.request_timeout)
            .await?;
        wire::count_of(data).map_err(|reason| self.protocol(op, "POST", "requeue", reason))
    }

    /// Removes a task's record, whatever its state.
    pub async fn delete(&self, topic: &str, id: &str) -> Result<(), ClientError> {
        let body = TaskRef {
            topic,
            id,
            receipt: None,
        };
        self.post_ignoring_data("deleting a task", "delete", &body)
            .await
    }

    /// The full view of one task.
    pub async fn get(&self, topic: &str, id: &str) -> Result<TaskInfo, ClientError> {
        let op = "getting a task";
        let task: Option<wire::WireTaskInfo> = self
            .get_json(op, "get", &[("topic", topic), ("id", id)])
            .await?;
        task.map(TaskInfo::from)
            .ok_or_else(|| self.protocol(op, "GET", "get", "no task in the answer".into()))
    }

    /// One page of the tasks of `topic`, ordered by due time.
    pub async fn tasks(
        &self,
        topic: &str,
        options: &ListOptions,
    ) -> Result<Page<TaskInfo>, ClientError> {
        let op = "listing tasks";
        let page = options.page.to_string();
        let page_size = options.page_size.to_string();
        let mut query = vec![
            ("topic", topic),
            ("page", page.as_str()),
            ("page_size", page_size.as_str()),
        ];
        if let Some(state) = options.state {
            query.push(("state", state.name()));
        }
        let page: Option<wire::WirePage> = self.get_json(op, "tasks", &query).await?;
        page.map(Page::from)
            .ok_or_else(|| self.protocol(op, "GET", "tasks", "no page in the answer".into()))
    }

    /// The counters of one topic.
    pub async fn stats(&self, topic: &str) -> Result<TopicStats, ClientError> {
        let op = "reading the stats of a topic";
        let stats: Option<TopicStats> = self.get_json(op, "stats", &[("topic", topic)]).await?;
        Ok(stats.unwrap_or_default())
    }

    /// Every topic with its counters.
    pub async fn topics(&self) -> Result<Vec<(String, TopicStats)>, ClientError> {
        let op = "listing topics";
        let topics: Option<wire::WireTopics> = self.get_json(op, "topics", &[]).await?;
        Ok(topics
            .map(|t| t.topics.into_iter().map(|t| (t.name, t.stats)).collect())
            .unwrap_or_default())
    }

    /// Checks that the server is alive (`/healthz`).
    pub async fn healthz(&self) -> Result<(), ClientError> {
        let _: Option<serde::de::IgnoredAny> = self
            .get_json("checking the server's health", "healthz", &[])
            .await?;
        Ok(())
    }

    /// Checks that the server is ready to serve, its storage reachable (`/readyz`).
    pub async fn readyz(&self) -> Result<(), ClientError> {
        let _: Option<serde::de::IgnoredAny> = self
            .get_json("checking the server's readiness", "readyz", &[])
            .await?;
        Ok(())
    }

    /// The server's metrics in Prometheus text format.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let op = "reading metrics";
        let url = self.url("metrics");
        let response = self
            .authorize(self.http.get(url.clone()))
            .timeout(self.inner.request_timeout)
            .send()
            .await
            .map_err(|err| ClientError::transport(op, "GET", url.to_string(), err))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|err| ClientError::transport(op, "GET", url.to_string(), err))?;
        if !status.is_success() {
            return Err(api_error(op, "GET", url.as_str(), status.as_u16(), &bytes));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn url(&self, endpoint: &str) -> Url {
        // The base path ends in `/` and endpoints are plain words, so this cannot fail.
        self.inner
            .base
            .join(endpoint)
            .unwrap_or_else(|_| self.inner.base.clone())
    }

    fn authorize(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.inner.auth {
            Some(value) => request.header(AUTHORIZATION, value.clone()),
            None => request,
        }
    }

    fn protocol(
        &self,
        op: &'static str,
        method: &'static str,
        endpoint: &str,
        reason: String,
    ) -> ClientError {
        ClientError::Protocol {
            op,
            method,
            url: self.url(endpoint).to_string(),
            status: 200,
            reason,
        }
    }

    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        op: &'static str,
        endpoint: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<Option<T>, ClientError> {
        let url = self.url(endpoint);
        let request = self
            .authorize(self.http.request(Method::POST, url.clone()))
            .json(body)
            .timeout(timeout);
        self.exchange(op, "POST", url, request).await
    }

    async fn post_ignoring_data<B: Serialize + ?Sized>(
        &self,
        op: &'static str,
        endpoint: &str,
        body: &B,
    ) -> Result<(), ClientError> {
        let _: Option<serde::de::IgnoredAny> = self
            .post(op, endpoint, body, self.inner.request_timeout)
            .await?;
        Ok(())
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        op: &'static str,
        endpoint: &str,
        query: &[(&str, &str)],
    ) -> Result<Option<T>, ClientError> {
        let mut url = self.url(endpoint);
        if !query.is_empty() {
            url.query_pairs_mut().extend_pairs(query);
        }
        let request = self
            .authorize(self.http.get(url.clone()))
            .timeout(self.inner.request_timeout);
        self.exchange(op, "GET", url, request).await
    }

    /// Sends a request and reads the envelope.
    async fn exchange<T: DeserializeOwned>(
        &self,
        op: &'static str,
        method: &'static str,
        url: Url,
        request: reqwest::RequestBuilder,
    ) -> Result<Option<T>, ClientError> {
        let response = request
            .send()
            .await
            .map_err(|err| ClientError::transport(op, method, url.to_string(), err))?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|err| ClientError::transport(op, method, url.to_string(), err))?;
        if !(200..300).contains(&status) {
            return Err(api_error(op, method, url.as_str(), status, &bytes));
        }
        match serde_json::from_slice::<Envelope<T>>(&bytes) {
            Ok(envelope) if envelope.code == 0 => Ok(envelope.data),
            Ok(envelope) => Err(ClientError::Api {
                op,
                method,
                url: url.to_string(),
                status,
                code: envelope.code,
                message: envelope.message,
            }),
            Err(err) => Err(ClientError::Protocol {
                op,
                method,
                url: url.to_string(),
                status,
                reason: format!("{err}; the answer was {}", excerpt(&bytes)),
            }),
        }
    }
}

/// The error of a non-2xx answer: the envelope's code and message when there is one, else the
/// status and the start of the body.
fn api_error(
    op: &'static str,
    method: &'static str,
    url: &str,
    status: u16,
    bytes: &[u8],
) -> ClientError {
    let (code, message) = match serde_json::from_slice::<Envelope<serde::de::IgnoredAny>>(bytes) {
        Ok(envelope) => (envelope.code, envelope.message),
        Err(_) if bytes.is_empty() => (i64::from(status), reason_phrase(status).to_owned()),
        Err(_) => (i64::from(status), excerpt(bytes)),
    };
    ClientError::Api {
        op,
        method,
        url: url.to_owned(),
        status,
        code,
        message,
    }
}

fn reason_phrase(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("no message")
}

/// The first 200 characters of a body, for error messages.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

/// Checks and normalizes a base URL: `http` or `https`, a host, a path ending in `/`, no query.
fn parse_base_url(text: &str) -> Result<Url, ClientError> {
    let invalid = |reason: &str| ClientError::InvalidUrl {
        url: text.to_owned(),
        reason: reason.to_owned(),
    };
    let mut url = Url::parse(text).map_err(|err| invalid(&err.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.host().is_none() {
        return Err(invalid("there is no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("a server URL has no query or fragment"));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    Ok(url)
}

impl BatchItem {
    /// Whether the task was accepted (added, replaced or existed).
    pub fn is_ok(&self) -> bool {
        self.result.is_ok()
    }
}

impl std::fmt::Display for BatchItemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        let table = [
            ("http://127.0.0.1:9280", Ok("http://127.0.0.1:9280/")),
            ("http://localhost:9280/", Ok("http://localhost:9280/")),
            ("https://q.example/delayq", Ok("https://q.example/delayq/")),
            ("127.0.0.1:9280", Err(())),
            ("ftp://h/", Err(())),
            ("http://h/?a=b", Err(())),
            ("not a url", Err(())),
        ];
        for (input, expected) in table {
            let got = parse_base_url(input).map(|u| u.to_string()).map_err(|_| ());
            assert_eq!(got, expected.map(str::to_owned), "{input}");
        }
    }

    #[test]
    fn endpoints_join_under_the_base_path() {
        let client = Client::new("https://q.example/delayq", None).unwrap();
        assert_eq!(client.url("add").as_str(), "https://q.example/delayq/add");
    }

    #[test]
    fn error_of_an_answer_without_envelope() {
        let err = api_error(
            "getting a task",
            "GET",
            "http://h/get",
            502,
            b"<html>bad gateway</html>",
        );
        assert_eq!(err.status(), Some(502));
        assert!(err.to_string().contains("bad gateway"), "{err}");
        let err = api_error("getting a task", "GET", "http://h/get", 404, b"");
        assert_eq!(err.api_message(), Some("Not Found"));
    }
}
