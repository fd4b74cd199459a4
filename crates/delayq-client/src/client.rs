//! The [`Client`]: one method per operation of docs/design.md §3.
//!
//! Each method builds its request from the contract crate's types ([`delayq_api`]), sends it
//! with the shared connection pool, reads the `{"code", "message", "data"}` envelope and
//! returns `data` decoded into the same types the server encoded it from. Failures become a
//! [`ClientError`] naming the operation and the URL. A `Client` is cheap to clone and meant to
//! be shared: all clones use one pool of keep-alive HTTP/1.1 connections.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use delayq_api::endpoint::{self, Endpoint, Method, NoParams, ScheduleAt};
use delayq_api::flow::{LimitsQuery, LimitsRequest, LimitsView};
use delayq_api::push::{PushQuery, PushTarget, TargetView};
use delayq_api::{
    AckRequest, AddBatchRequest, AddData, AddRequest, AddTaskRequest, AllStats,
    BatchItem as WireBatchItem, BuryRequest, Count, Envelope, ErrorData, FinishBatchData,
    FinishBatchRequest, FinishRequest, GetQuery, PauseData, PauseRequest, PopData, PopRequest,
    PutScheduleData, ReleaseRequest, RequeueData, RequeueRequest, RescheduleRequest, ScheduleKey,
    ScheduleList, ScheduleQuery, ScheduleRequest, ScheduleView, SchedulesQuery, StatsData,
    StatsQuery, StatsView, TaskDelivery, TaskKey, TaskPage, TaskView, TasksQuery, TopicRequest,
    WholeMillis,
};
use delayq_core::{AddOutcome, BuryOptions, Millis, NewTask, ReleaseOptions, State, When};
use reqwest::Url;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::ClientError;
use crate::wire;
use crate::{BatchItem, BatchItemError};

/// How long a request other than a long-poll may take by default.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long connecting may take by default.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// What a pop waits for beyond its own long-poll timeout before the client gives up.
const POP_GRACE: Duration = Duration::from_secs(10);
/// The server's default long-poll timeout, used to size the request timeout when the caller
/// leaves `timeout_ms` to the server.
const SERVER_DEFAULT_POP_TIMEOUT_MS: u64 = delayq_api::DEFAULT_POP_TIMEOUT_MS;

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

/// The acknowledgement a pop carries ([`Client::pop_after`]).
#[derive(Debug, Clone, Copy)]
pub enum Ack<'a> {
    /// Finish the task (ACTIVE → FINISHED).
    Finish {
        /// Its topic.
        topic: &'a str,
        /// Its id.
        id: &'a str,
        /// The receipt of the attempt.
        receipt: Option<&'a str>,
    },
    /// Release the task (a failed attempt: READY, DELAYED or DEAD).
    Release {
        /// Its topic.
        topic: &'a str,
        /// Its id.
        id: &'a str,
        /// The receipt, delay, error and priority, as for [`Client::release`].
        options: &'a ReleaseOptions,
    },
}

/// Which tasks [`Client::tasks`] lists.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListOptions {
    /// Only tasks in this state.
    pub state: Option<State>,
    /// The page number, from 1.
    pub page: u64,
    /// Tasks per page (the server clamps it to its `max_page_size`, 1000 by default).
    pub page_size: u64,
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions {
            state: None,
            page: 1,
            page_size: delayq_api::DEFAULT_PAGE_SIZE,
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

    /// Sends a [`Call`] and returns the `data` of the answer as raw JSON (`None` for `null`),
    /// exactly as the server wrote it. This is what `delayq --json` prints.
    pub async fn send(&self, call: &Call) -> Result<Option<serde_json::Value>, ClientError> {
        self.exchange(call).await
    }

    /// Sends a request of endpoint `E` (see [`delayq_api::endpoint`]) and returns the `data`
    /// of the answer decoded into the endpoint's response type (`None` for `null`). Every
    /// typed method below is this call with the request built from its arguments. `/metrics`
    /// and `/openapi.json` answer without the envelope, so this call cannot read them; the
    /// metrics have [`Client::metrics`].
    pub async fn call<E: Endpoint>(
        &self,
        request: &E::Request,
    ) -> Result<Option<E::Response>, ClientError> {
        self.exchange(&Call::of::<E>(request)).await
    }

    /// Adds one task. Returns whether it was added, replaced or existed already (per its
    /// `on_duplicate`).
    pub async fn add(&self, task: &NewTask) -> Result<AddOutcome, ClientError> {
        // Read as `AddData` alone: one task's answer is never a batch's list.
        let data: Option<AddData> = self.exchange(&Call::add(task)).await?;
        Ok(wire::outcome_of(data))
    }

    /// Adds a batch of tasks in one round trip (and one durable write on the server). Returns
    /// one result per task, in order; a refused task does not stop the others.
    pub async fn add_batch(&self, tasks: &[NewTask]) -> Result<Vec<BatchItem>, ClientError> {
        self.batch(Call::add_batch(tasks), tasks.len()).await
    }

    /// Adds a batch given as raw JSON task objects (each the `/add` body of one task), as read
    /// from a JSON-lines file. The server validates each object.
    pub async fn add_batch_raw(
        &self,
        tasks: &[serde_json::Value],
    ) -> Result<Vec<BatchItem>, ClientError> {
        self.batch(Call::add_batch_raw(tasks), tasks.len()).await
    }

    /// Long-polls `topic` for up to `options.count` ready tasks. Returns an empty list when
    /// none became ready within the timeout.
    pub async fn pop(
        &self,
        topic: &str,
        options: PopOptions,
    ) -> Result<Vec<TaskDelivery>, ClientError> {
        let data: Option<PopData> = self.exchange(&Call::pop(topic, options)).await?;
        Ok(data.map(PopData::into_vec).unwrap_or_default())
    }

    /// Acknowledges the task a consumer held and takes the next in one request: a consumer
    /// loop of one request a task. The acknowledgement is applied first, exactly as
    /// [`Client::finish`] or [`Client::release`] would apply it; when it fails, that is the
    /// error and nothing was popped. Then the pop long-polls as [`Client::pop`] does.
    pub async fn pop_after(
        &self,
        ack: Ack<'_>,
        topic: &str,
        options: PopOptions,
    ) -> Result<Vec<TaskDelivery>, ClientError> {
        let data: Option<PopData> = self.exchange(&Call::pop_after(ack, topic, options)).await?;
        Ok(data.map(PopData::into_vec).unwrap_or_default())
    }

    /// Confirms a popped task: ACTIVE → FINISHED.
    pub async fn finish(
        &self,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
    ) -> Result<(), ClientError> {
        let request = FinishRequest::One(ack(topic, id, receipt));
        self.call::<endpoint::Finish>(&request).await.map(drop)
    }

    /// Confirms a batch of popped tasks, each `(topic, id, receipt)`, in one round trip.
    /// Returns one result per task, in order: a task that is unknown (404), no longer ACTIVE
    /// or whose receipt is stale (409) fails alone.
    pub async fn finish_batch(
        &self,
        tasks: &[(&str, &str, Option<&str>)],
    ) -> Result<Vec<Result<(), BatchItemError>>, ClientError> {
        let call = Call::finish_batch(tasks);
        let data: Option<FinishBatchData> = self.exchange(&call).await?;
        wire::finish_results(data, tasks.len()).map_err(|reason| self.protocol(&call, reason))
    }

    /// Gives a popped task back as failed: it is redelivered per its backoff (or `delay_ms`),
    /// or goes DEAD when out of retries. Returns the task's new state (delayed, ready or dead).
    pub async fn release(
        &self,
        topic: &str,
        id: &str,
        options: &ReleaseOptions,
    ) -> Result<State, ClientError> {
        let request = release_request(topic, id, options);
        self.required::<endpoint::Release>(&request, "state")
            .await
            .map(|d| d.state)
    }

    /// Restarts the time to run of a popped task. Returns the new ttr deadline (epoch ms).
    pub async fn touch(
        &self,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
    ) -> Result<Millis, ClientError> {
        let request = ack(topic, id, receipt);
        self.required::<endpoint::Touch>(&request, "deadline")
            .await
            .map(|d| d.deadline_ms)
    }

    /// Cancels a task: it is never delivered again.
    pub async fn cancel(&self, topic: &str, id: &str) -> Result<(), ClientError> {
        self.call::<endpoint::Cancel>(&key(topic, id))
            .await
            .map(drop)
    }

    /// Makes a DEAD task READY again, its retries reset.
    pub async fn requeue(&self, topic: &str, id: &str) -> Result<(), ClientError> {
        self.call::<endpoint::Requeue>(&requeue_request(topic, Some(id)))
            .await
            .map(drop)
    }

    /// Makes every DEAD task of `topic` READY again. Returns how many were requeued.
    pub async fn requeue_all(&self, topic: &str) -> Result<u64, ClientError> {
        let call = Call::requeue_all(topic);
        let data: Option<RequeueData> = self.exchange(&call).await?;
        data.map(|d| d.requeued)
            .ok_or_else(|| self.protocol(&call, "no count in the answer".into()))
    }

    /// Buries a task the caller holds: ACTIVE → DEAD with the reason "buried" (or
    /// `options.error`), docs/design.md §2 rule 13.
    pub async fn bury(
        &self,
        topic: &str,
        id: &str,
        options: &BuryOptions,
    ) -> Result<(), ClientError> {
        self.call::<endpoint::Bury>(&bury_request(topic, id, options))
            .await
            .map(drop)
    }

    /// Gives a DELAYED or READY task a new due (rule 15). Returns its new state: DELAYED, or
    /// READY when the new due is now.
    pub async fn reschedule(
        &self,
        topic: &str,
        id: &str,
        when: When,
    ) -> Result<State, ClientError> {
        let request = reschedule_request(topic, id, when);
        self.required::<endpoint::Reschedule>(&request, "state")
            .await
            .map(|d| d.state)
    }

    /// Pauses `topic` (rule 14) for `for_ms`, or until resumed when `None`. Returns the pause
    /// as it now stands.
    pub async fn pause(&self, topic: &str, for_ms: Option<u64>) -> Result<PauseData, ClientError> {
        let request = PauseRequest {
            topic: topic.to_owned(),
            for_ms: for_ms.map(WholeMillis),
        };
        self.required::<endpoint::Pause>(&request, "pause").await
    }

    /// Ends the pause of `topic`. Returns the pause as it now stands.
    pub async fn resume(&self, topic: &str) -> Result<PauseData, ClientError> {
        let request = TopicRequest {
            topic: topic.to_owned(),
        };
        self.required::<endpoint::Resume>(&request, "pause").await
    }

    /// Creates a schedule, or replaces the definition of the one with the same topic and name.
    pub async fn put_schedule(
        &self,
        schedule: &ScheduleRequest,
    ) -> Result<PutScheduleData, ClientError> {
        self.required::<endpoint::PutSchedule>(schedule, "schedule")
            .await
    }

    /// Every schedule, or those of `topic`.
    pub async fn schedules(&self, topic: Option<&str>) -> Result<ScheduleList, ClientError> {
        let query = SchedulesQuery {
            topic: topic.map(str::to_owned),
        };
        self.required::<endpoint::ListSchedules>(&query, "schedules")
            .await
    }

    /// One schedule with its next `next` occurrences (server default 10).
    pub async fn schedule(
        &self,
        topic: &str,
        name: &str,
        next: Option<u64>,
    ) -> Result<ScheduleView, ClientError> {
        let at = schedule_at(topic, name, next);
        self.required::<endpoint::GetSchedule>(&at, "schedule")
            .await
    }

    /// Deletes a schedule; its pending occurrence is cancelled.
    pub async fn delete_schedule(&self, topic: &str, name: &str) -> Result<(), ClientError> {
        self.call::<endpoint::DeleteSchedule>(&schedule_key(topic, name))
            .await
            .map(drop)
    }

    /// Pauses a schedule. Returns it as it now stands.
    pub async fn pause_schedule(
        &self,
        topic: &str,
        name: &str,
    ) -> Result<ScheduleView, ClientError> {
        let key = schedule_key(topic, name);
        self.required::<endpoint::PauseSchedule>(&key, "schedule")
            .await
    }

    /// Resumes a paused schedule. Returns it as it now stands.
    pub async fn resume_schedule(
        &self,
        topic: &str,
        name: &str,
    ) -> Result<ScheduleView, ClientError> {
        let key = schedule_key(topic, name);
        self.required::<endpoint::ResumeSchedule>(&key, "schedule")
            .await
    }

    /// Removes a task's record, whatever its state.
    pub async fn delete(&self, topic: &str, id: &str) -> Result<(), ClientError> {
        self.call::<endpoint::Delete>(&key(topic, id))
            .await
            .map(drop)
    }

    /// The full view of one task.
    pub async fn get(&self, topic: &str, id: &str) -> Result<TaskView, ClientError> {
        self.required::<endpoint::GetTask>(&get_query(topic, id), "task")
            .await
    }

    /// One page of the tasks of `topic`, ordered by due time.
    pub async fn tasks(&self, topic: &str, options: &ListOptions) -> Result<TaskPage, ClientError> {
        let query = tasks_query(topic, options);
        self.required::<endpoint::ListTasks>(&query, "page").await
    }

    /// Sets the push target of `target.topic`; returns it as the server shows it.
    pub async fn push_set(&self, target: &PushTarget) -> Result<TargetView, ClientError> {
        self.required::<endpoint::PushSet>(target, "target").await
    }

    /// The push targets: of one topic (none or one), or every one.
    pub async fn push_get(&self, topic: Option<&str>) -> Result<Vec<TargetView>, ClientError> {
        let list = self.call::<endpoint::PushGet>(&push_query(topic)).await?;
        Ok(list.map(|l| l.targets).unwrap_or_default())
    }

    /// Removes a topic's push target; whether it had one.
    pub async fn push_delete(&self, topic: &str) -> Result<bool, ClientError> {
        let deleted = self
            .call::<endpoint::PushDelete>(&push_query(Some(topic)))
            .await?;
        Ok(deleted.is_some_and(|d| d.deleted))
    }

    /// Sets the flow limits of a topic (replacing the ones it had); returns them as the server
    /// shows them.
    pub async fn limits_set(
        &self,
        topic: &str,
        limits: &delayq_core::FlowLimits,
    ) -> Result<LimitsView, ClientError> {
        self.required::<endpoint::LimitsSet>(&LimitsRequest::new(topic, limits), "limits")
            .await
    }

    /// The flow limits: of one topic (none or one), or of every topic that has some.
    pub async fn limits_get(&self, topic: Option<&str>) -> Result<Vec<LimitsView>, ClientError> {
        let list = self
            .call::<endpoint::LimitsGet>(&limits_query(topic))
            .await?;
        Ok(list.map(|l| l.limits).unwrap_or_default())
    }

    /// Removes a topic's flow limits; whether it had some.
    pub async fn limits_delete(&self, topic: &str) -> Result<bool, ClientError> {
        let deleted = self
            .call::<endpoint::LimitsDelete>(&limits_query(Some(topic)))
            .await?;
        Ok(deleted.is_some_and(|d| d.deleted))
    }

    /// The counters of one topic.
    pub async fn stats(&self, topic: &str) -> Result<StatsView, ClientError> {
        let query = stats_query(Some(topic));
        match self.call::<endpoint::Stats>(&query).await? {
            Some(StatsData::Topic(stats)) => Ok(stats.stats),
            None => Ok(StatsView::default()),
            Some(StatsData::All(_)) => Err(self.protocol(
                &Call::of::<endpoint::Stats>(&query),
                "the counters of every topic, not of one".into(),
            )),
        }
    }

    /// The counters of every topic, by name.
    pub async fn stats_all(&self) -> Result<BTreeMap<String, StatsView>, ClientError> {
        // Read as `AllStats` alone: an answer for one topic would otherwise pass as one.
        let call = Call::of::<endpoint::Stats>(&stats_query(None));
        let stats: Option<AllStats> = self.exchange(&call).await?;
        Ok(stats.map(|s| s.topics).unwrap_or_default())
    }

    /// Every topic with its counters.
    pub async fn topics(&self) -> Result<Vec<(String, StatsView)>, ClientError> {
        let topics = self.call::<endpoint::Topics>(&NoParams {}).await?;
        Ok(topics
            .map(|t| t.topics.into_iter().map(|t| (t.name, t.stats)).collect())
            .unwrap_or_default())
    }

    /// Checks that the server is alive (`/healthz`).
    pub async fn healthz(&self) -> Result<(), ClientError> {
        self.call::<endpoint::Healthz>(&NoParams {}).await.map(drop)
    }

    /// Checks that the server is ready to serve, its storage reachable (`/readyz`).
    pub async fn readyz(&self) -> Result<(), ClientError> {
        self.call::<endpoint::Readyz>(&NoParams {}).await.map(drop)
    }

    /// The server's metrics in Prometheus text format.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let call = Call::metrics();
        let (url, response) = self.dispatch(&call).await?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(|err| {
            ClientError::transport(call.op, call.method.name(), url.to_string(), err)
        })?;
        if !(200..300).contains(&status) {
            return Err(api_error(
                call.op,
                call.method.name(),
                url.as_str(),
                status,
                &bytes,
            ));
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// [`Client::call`] for an answer that must have `data` (`what` names it in the error).
    async fn required<E: Endpoint>(
        &self,
        request: &E::Request,
        what: &str,
    ) -> Result<E::Response, ClientError> {
        let call = Call::of::<E>(request);
        let data: Option<E::Response> = self.exchange(&call).await?;
        data.ok_or_else(|| self.protocol(&call, format!("no {what} in the answer")))
    }

    /// Sends a batch `/add` and numbers its results.
    async fn batch(&self, call: Call, expected: usize) -> Result<Vec<BatchItem>, ClientError> {
        let data: Option<Vec<WireBatchItem>> = self.exchange(&call).await?;
        wire::batch_results(data, expected).map_err(|reason| self.protocol(&call, reason))
    }

    fn url(&self, call: &Call) -> Url {
        // The base path ends in `/` and endpoints are plain words, so joining cannot fail.
        let mut url = self
            .inner
            .base
            .join(&call.endpoint)
            .unwrap_or_else(|_| self.inner.base.clone());
        if !call.query.is_empty() {
            url.set_query(Some(&call.query));
        }
        url
    }

    fn protocol(&self, call: &Call, reason: String) -> ClientError {
        ClientError::Protocol {
            op: call.op,
            method: call.method.name(),
            url: self.url(call).to_string(),
            status: 200,
            reason,
        }
    }

    /// Sends a call and returns the response head.
    async fn dispatch(&self, call: &Call) -> Result<(Url, reqwest::Response), ClientError> {
        let url = self.url(call);
        let mut request = match call.method {
            Method::Get => self.http.get(url.clone()),
            Method::Post => self.http.post(url.clone()),
            Method::Delete => self.http.delete(url.clone()),
        };
        if let Some(auth) = &self.inner.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        if let Some(body) = &call.body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body.clone());
        }
        let timeout = match call.long_poll {
            Some(wait) => wait + POP_GRACE,
            None => self.inner.request_timeout,
        };
        let response = request.timeout(timeout).send().await.map_err(|err| {
            ClientError::transport(call.op, call.method.name(), url.to_string(), err)
        })?;
        Ok((url, response))
    }

    /// Sends a call and reads the envelope, its `data` as `T`.
    async fn exchange<T: DeserializeOwned>(&self, call: &Call) -> Result<Option<T>, ClientError> {
        let (op, method) = (call.op, call.method.name());
        let (url, response) = self.dispatch(call).await?;
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .map_err(|err| ClientError::transport(op, method, url.to_string(), err))?;
        if !(200..300).contains(&status) {
            return Err(api_error(op, method, url.as_str(), status, &bytes));
        }
        match serde_json::from_slice::<Envelope<Option<T>>>(&bytes) {
            Ok(envelope) if envelope.code == 0 => Ok(envelope.data),
            Ok(envelope) => Err(ClientError::Api {
                op,
                method,
                url: url.to_string(),
                status,
                code: i64::from(envelope.code),
                message: envelope.message,
                outcome_unknown: false,
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

/// One request of the API, built but not sent: the endpoint, its query or JSON body, and what
/// it does in words (for error messages).
///
/// [`Call::of`] builds the request of any endpoint of the table ([`delayq_api::endpoint`]);
/// the named constructors build it from the client's own arguments. [`Client::send`] sends
/// one and returns the raw `data`, for callers that pass the server's JSON on
/// (`delayq --json`).
#[derive(Debug, Clone)]
pub struct Call {
    op: &'static str,
    method: Method,
    /// The path under the base URL: `add`, or `schedules/{topic}/{name}`.
    endpoint: Cow<'static, str>,
    /// The query string, without the `?`.
    query: String,
    body: Option<Vec<u8>>,
    /// For a long-poll: how long the server may wait before answering.
    long_poll: Option<Duration>,
}

impl Call {
    /// The request of endpoint `E`: a JSON body for `POST`, else a query string.
    pub fn of<E: Endpoint>(request: &E::Request) -> Call {
        if E::METHOD.has_body() {
            Call::with_body::<E>(request)
        } else {
            let endpoint = match E::path(request) {
                Cow::Borrowed(path) => Cow::Borrowed(path.trim_start_matches('/')),
                Cow::Owned(path) => Cow::Owned(path.trim_start_matches('/').to_owned()),
            };
            Call {
                op: E::DOING,
                method: E::METHOD,
                endpoint,
                query: query_string(request),
                body: None,
                long_poll: None,
            }
        }
    }

    /// A `POST` to endpoint `E` with `body`, which may be other than the endpoint's request
    /// type (raw JSON task objects).
    fn with_body<E: Endpoint>(body: &impl Serialize) -> Call {
        Call {
            op: E::DOING,
            method: E::METHOD,
            endpoint: Cow::Borrowed(E::PATH.trim_start_matches('/')),
            query: String::new(),
            // Serializing these request structs and `serde_json::Value`s cannot fail: they
            // have string keys only and no custom serializers that error.
            body: Some(serde_json::to_vec(body).expect("request bodies always serialize")),
            long_poll: None,
        }
    }

    /// The same call, described as `op` in error messages.
    fn doing(mut self, op: &'static str) -> Call {
        self.op = op;
        self
    }

    /// What this call does, in words (`adding a task`).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// `POST /add` of one task.
    pub fn add(task: &NewTask) -> Call {
        Call::of::<endpoint::Add>(&add_one(task))
    }

    /// `POST /add` of one raw JSON task object (the `/add` body of one task).
    pub fn add_raw(task: &serde_json::Value) -> Call {
        Call::with_body::<endpoint::Add>(task)
    }

    /// `POST /add` of a batch.
    pub fn add_batch(tasks: &[NewTask]) -> Call {
        let body = AddRequest::Batch(AddBatchRequest {
            tasks: tasks.iter().map(AddTaskRequest::from).collect(),
        });
        Call::of::<endpoint::Add>(&body).doing("adding a batch of tasks")
    }

    /// `POST /add` of a batch of raw JSON task objects.
    pub fn add_batch_raw(tasks: &[serde_json::Value]) -> Call {
        #[derive(Serialize)]
        struct RawBatch<'a> {
            tasks: &'a [serde_json::Value],
        }
        Call::with_body::<endpoint::Add>(&RawBatch { tasks }).doing("adding a batch of tasks")
    }

    /// `POST /pop`.
    pub fn pop(topic: &str, options: PopOptions) -> Call {
        Call::pop_request(PopRequest::default(), topic, options)
    }

    /// `POST /pop` carrying the acknowledgement of the task held before.
    pub fn pop_after(ack: Ack<'_>, topic: &str, options: PopOptions) -> Call {
        let mut body = PopRequest::default();
        match ack {
            Ack::Finish {
                topic: held,
                id,
                receipt,
            } => body.finish = Some(self::ack(held, id, receipt)),
            Ack::Release {
                topic: held,
                id,
                options: release,
            } => body.release = Some(release_request(held, id, release)),
        }
        Call::pop_request(body, topic, options)
    }

    fn pop_request(body: PopRequest, topic: &str, options: PopOptions) -> Call {
        let body = PopRequest {
            topic: topic.to_owned(),
            timeout_ms: options.timeout_ms.map(WholeMillis),
            count: Some(Count(options.count as u64)),
            auto_finish: options.auto_finish.then_some(true),
            ..body
        };
        let mut call = Call::of::<endpoint::Pop>(&body);
        call.long_poll = Some(Duration::from_millis(
            options.timeout_ms.unwrap_or(SERVER_DEFAULT_POP_TIMEOUT_MS),
        ));
        call
    }

    /// `POST /finish`.
    pub fn finish(topic: &str, id: &str, receipt: Option<&str>) -> Call {
        Call::of::<endpoint::Finish>(&FinishRequest::One(ack(topic, id, receipt)))
    }

    /// `POST /finish` of a batch, each task `(topic, id, receipt)`.
    pub fn finish_batch(tasks: &[(&str, &str, Option<&str>)]) -> Call {
        let body = FinishRequest::Batch(FinishBatchRequest {
            tasks: tasks
                .iter()
                .map(|&(topic, id, receipt)| ack(topic, id, receipt))
                .collect(),
        });
        Call::of::<endpoint::Finish>(&body).doing("finishing a batch of tasks")
    }

    /// `POST /release`.
    pub fn release(topic: &str, id: &str, options: &ReleaseOptions) -> Call {
        Call::of::<endpoint::Release>(&release_request(topic, id, options))
    }

    /// `POST /bury`.
    pub fn bury(topic: &str, id: &str, options: &BuryOptions) -> Call {
        Call::of::<endpoint::Bury>(&bury_request(topic, id, options))
    }

    /// `POST /reschedule`.
    pub fn reschedule(topic: &str, id: &str, when: When) -> Call {
        Call::of::<endpoint::Reschedule>(&reschedule_request(topic, id, when))
    }

    /// `POST /pause`.
    pub fn pause(topic: &str, for_ms: Option<u64>) -> Call {
        Call::of::<endpoint::Pause>(&PauseRequest {
            topic: topic.to_owned(),
            for_ms: for_ms.map(WholeMillis),
        })
    }

    /// `POST /resume`.
    pub fn resume(topic: &str) -> Call {
        Call::of::<endpoint::Resume>(&TopicRequest {
            topic: topic.to_owned(),
        })
    }

    /// `POST /touch`.
    pub fn touch(topic: &str, id: &str, receipt: Option<&str>) -> Call {
        Call::of::<endpoint::Touch>(&ack(topic, id, receipt))
    }

    /// `POST /cancel`.
    pub fn cancel(topic: &str, id: &str) -> Call {
        Call::of::<endpoint::Cancel>(&key(topic, id))
    }

    /// `POST /requeue` of one task.
    pub fn requeue(topic: &str, id: &str) -> Call {
        Call::of::<endpoint::Requeue>(&requeue_request(topic, Some(id)))
    }

    /// `POST /requeue` of every DEAD task of a topic.
    pub fn requeue_all(topic: &str) -> Call {
        Call::of::<endpoint::Requeue>(&requeue_request(topic, None))
            .doing("requeueing the dead tasks of a topic")
    }

    /// `POST /delete`.
    pub fn delete(topic: &str, id: &str) -> Call {
        Call::of::<endpoint::Delete>(&key(topic, id))
    }

    /// `GET /get`.
    pub fn get(topic: &str, id: &str) -> Call {
        Call::of::<endpoint::GetTask>(&get_query(topic, id))
    }

    /// `GET /tasks`.
    pub fn tasks(topic: &str, options: &ListOptions) -> Call {
        Call::of::<endpoint::ListTasks>(&tasks_query(topic, options))
    }

    /// `GET /stats`, of one topic or of all.
    pub fn stats(topic: Option<&str>) -> Call {
        Call::of::<endpoint::Stats>(&stats_query(topic))
    }

    /// `POST /push`: sets a topic's push target.
    pub fn push_set(target: &PushTarget) -> Call {
        Call::of::<endpoint::PushSet>(target)
    }

    /// `GET /push`, of one topic or of all.
    pub fn push_get(topic: Option<&str>) -> Call {
        Call::of::<endpoint::PushGet>(&push_query(topic))
    }

    /// `DELETE /push?topic=`: removes a topic's push target.
    pub fn push_delete(topic: &str) -> Call {
        Call::of::<endpoint::PushDelete>(&push_query(Some(topic)))
    }

    /// `POST /limits`: sets a topic's flow limits.
    pub fn limits_set(topic: &str, limits: &delayq_core::FlowLimits) -> Call {
        Call::of::<endpoint::LimitsSet>(&LimitsRequest::new(topic, limits))
    }

    /// `GET /limits`, of one topic or of all.
    pub fn limits_get(topic: Option<&str>) -> Call {
        Call::of::<endpoint::LimitsGet>(&limits_query(topic))
    }

    /// `DELETE /limits?topic=`: removes a topic's flow limits.
    pub fn limits_delete(topic: &str) -> Call {
        Call::of::<endpoint::LimitsDelete>(&limits_query(Some(topic)))
    }

    /// `POST /schedules`: creates a schedule or replaces its definition.
    pub fn put_schedule(schedule: &ScheduleRequest) -> Call {
        Call::of::<endpoint::PutSchedule>(schedule)
    }

    /// `GET /schedules`, of one topic or of all.
    pub fn schedules(topic: Option<&str>) -> Call {
        Call::of::<endpoint::ListSchedules>(&SchedulesQuery {
            topic: topic.map(str::to_owned),
        })
    }

    /// `GET /schedules/{topic}/{name}` with the next `next` occurrences (server default 10).
    pub fn schedule(topic: &str, name: &str, next: Option<u64>) -> Call {
        Call::of::<endpoint::GetSchedule>(&schedule_at(topic, name, next))
    }

    /// `POST /schedules/delete`.
    pub fn delete_schedule(topic: &str, name: &str) -> Call {
        Call::of::<endpoint::DeleteSchedule>(&schedule_key(topic, name))
    }

    /// `POST /schedules/pause`.
    pub fn pause_schedule(topic: &str, name: &str) -> Call {
        Call::of::<endpoint::PauseSchedule>(&schedule_key(topic, name))
    }

    /// `POST /schedules/resume`.
    pub fn resume_schedule(topic: &str, name: &str) -> Call {
        Call::of::<endpoint::ResumeSchedule>(&schedule_key(topic, name))
    }

    /// `GET /topics`.
    pub fn topics() -> Call {
        Call::of::<endpoint::Topics>(&NoParams {})
    }

    /// `GET /healthz`.
    pub fn healthz() -> Call {
        Call::of::<endpoint::Healthz>(&NoParams {})
    }

    /// `GET /readyz`.
    pub fn readyz() -> Call {
        Call::of::<endpoint::Readyz>(&NoParams {})
    }

    /// `GET /metrics`.
    pub fn metrics() -> Call {
        Call::of::<endpoint::Metrics>(&NoParams {})
    }
}

/// The body of one task's `/add`.
fn add_one(task: &NewTask) -> AddRequest {
    AddRequest::One(Box::new(AddTaskRequest::from(task)))
}

/// The body of `/release`.
fn release_request(topic: &str, id: &str, options: &ReleaseOptions) -> ReleaseRequest {
    ReleaseRequest {
        topic: topic.to_owned(),
        id: id.to_owned(),
        receipt: options.receipt.clone(),
        delay_ms: options.delay_ms.map(WholeMillis),
        error: options.error.clone(),
        priority: options.priority,
    }
}

/// The body of `/bury`.
fn bury_request(topic: &str, id: &str, options: &BuryOptions) -> BuryRequest {
    BuryRequest {
        topic: topic.to_owned(),
        id: id.to_owned(),
        receipt: options.receipt.clone(),
        error: options.error.clone(),
        priority: options.priority,
    }
}

/// The body of `/reschedule`.
fn reschedule_request(topic: &str, id: &str, when: When) -> RescheduleRequest {
    let (delay_ms, run_at_ms) = delayq_api::request::when_fields(when);
    RescheduleRequest {
        topic: topic.to_owned(),
        id: id.to_owned(),
        delay_ms,
        run_at_ms,
    }
}

/// The body of `/requeue`: one task, or every DEAD task of the topic when `id` is `None`.
fn requeue_request(topic: &str, id: Option<&str>) -> RequeueRequest {
    RequeueRequest {
        topic: topic.to_owned(),
        id: id.map(str::to_owned),
        all: id.is_none().then_some(true),
    }
}

/// The query of `/get`.
fn get_query(topic: &str, id: &str) -> GetQuery {
    GetQuery {
        topic: topic.to_owned(),
        id: id.to_owned(),
    }
}

/// The query of `/tasks`.
fn tasks_query(topic: &str, options: &ListOptions) -> TasksQuery {
    TasksQuery {
        topic: topic.to_owned(),
        state: options.state.map(|s| s.name().to_owned()),
        page: Some(options.page),
        page_size: Some(options.page_size),
    }
}

/// The query of `/stats`.
fn stats_query(topic: Option<&str>) -> StatsQuery {
    StatsQuery {
        topic: topic.map(str::to_owned),
    }
}

/// The query of `/push`.
fn limits_query(topic: Option<&str>) -> LimitsQuery {
    LimitsQuery {
        topic: topic.map(str::to_owned),
    }
}

fn push_query(topic: Option<&str>) -> PushQuery {
    PushQuery {
        topic: topic.map(str::to_owned),
    }
}

/// The request of `GET /schedules/{topic}/{name}`.
fn schedule_at(topic: &str, name: &str, next: Option<u64>) -> ScheduleAt {
    ScheduleAt {
        key: schedule_key(topic, name),
        query: ScheduleQuery {
            next: next.map(Count),
        },
    }
}

/// The body of `/finish` and `/touch`.
fn ack(topic: &str, id: &str, receipt: Option<&str>) -> AckRequest {
    AckRequest {
        topic: topic.to_owned(),
        id: id.to_owned(),
        receipt: receipt.map(str::to_owned),
    }
}

/// The body of `/cancel` and `/delete`.
fn key(topic: &str, id: &str) -> TaskKey {
    TaskKey {
        topic: topic.to_owned(),
        id: id.to_owned(),
    }
}

/// A query struct as a query string, in field order, unset fields left out.
fn query_string(query: &impl Serialize) -> String {
    // The query structs are flat, with string keys and plain values: they always encode.
    serde_urlencoded::to_string(query).unwrap_or_default()
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
    let (code, message, outcome_unknown) =
        match serde_json::from_slice::<Envelope<Option<ErrorData>>>(bytes) {
            Ok(envelope) => {
                let unknown = envelope
                    .data
                    .is_some_and(|d| d.outcome.as_deref() == Some("unknown"));
                (i64::from(envelope.code), envelope.message, unknown)
            }
            Err(_) if bytes.is_empty() => {
                (i64::from(status), reason_phrase(status).to_owned(), false)
            }
            Err(_) => (i64::from(status), excerpt(bytes), false),
        };
    ClientError::Api {
        op,
        method,
        url: url.to_owned(),
        status,
        code,
        message,
        outcome_unknown,
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

fn schedule_key(topic: &str, name: &str) -> ScheduleKey {
    ScheduleKey {
        topic: topic.to_owned(),
        name: name.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_outcome_in_the_envelope_is_reported() {
        let table: [(u16, &str, bool); 5] = [
            (
                500,
                r#"{"code":500,"message":"storage failed","data":{"outcome":"unknown"}}"#,
                true,
            ),
            (
                503,
                r#"{"code":503,"message":"unavailable","data":{"outcome":"unknown"}}"#,
                true,
            ),
            (
                500,
                r#"{"code":500,"message":"storage failed","data":null}"#,
                false,
            ),
            (
                409,
                r#"{"code":409,"message":"stale","data":{"field":"receipt"}}"#,
                false,
            ),
            (502, "bad gateway", false),
        ];
        for (status, body, unknown) in table {
            let err = api_error(
                "adding a task",
                "POST",
                "http://h/add",
                status,
                body.as_bytes(),
            );
            assert_eq!(err.is_outcome_unknown(), unknown, "{status} {body}");
            assert_eq!(err.status(), Some(status));
        }
    }

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
        let url = client.url(&Call::get("orders", "a b"));
        assert_eq!(
            url.as_str(),
            "https://q.example/delayq/get?topic=orders&id=a+b"
        );
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
