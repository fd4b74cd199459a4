//! The JSON shapes of the API: request bodies, query strings and the `data` of responses
//! (DESIGN §3), with their OpenAPI schemas.
//!
//! Field names follow seqdelay so its clients work unchanged. Numbers of milliseconds and
//! counts are read by [`Ms`] and [`Count`], which accept only whole non-negative JSON numbers
//! and say so in their error (a negative, fractional or huge number is a 400 naming the field,
//! never a wrap-around). A task `body` is text; a client that sends a JSON object or array
//! instead gets it stored as its JSON text.

use std::fmt;

use delayq::{Backoff, Delivery, MaxRetries, OnDuplicate, State, TaskInfo, TopicStats};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// A whole, non-negative number of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Ms(pub u64);

/// A whole, non-negative count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Count(pub u64);

struct WholeVisitor(&'static str);

impl Visitor<'_> for WholeVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
}

impl<'de> Deserialize<'de> for Ms {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_u64(WholeVisitor(
            "a whole number of milliseconds from 0 to 18446744073709551615",
        ))
        .map(Ms)
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_u64(WholeVisitor("a whole number, 0 or more"))
            .map(Count)
    }
}

/// A task body: text as is, any other JSON value as its JSON text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct BodyText(pub String);

impl<'de> Deserialize<'de> for BodyText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(BodyText(s)),
            other => Ok(BodyText(other.to_string())),
        }
    }
}

/// One task to add (`POST /add`, or an element of `tasks`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AddTaskRequest {
    /// The queue: `[A-Za-z0-9._:-]{1,128}`.
    #[schema(example = "order-auto-cancel")]
    pub topic: String,
    /// The caller's id, unique in the topic: `[A-Za-z0-9._:@/+=-]{1,256}`.
    #[schema(example = "cancel-123")]
    pub id: String,
    /// The payload, text (a JSON object or array is stored as its JSON text).
    #[serde(default)]
    #[schema(value_type = Option<String>, example = "{\"order_id\":\"123\"}")]
    pub body: Option<BodyText>,
    /// Due this many ms after arrival (default 0). Excludes `run_at_ms`.
    #[serde(default)]
    #[schema(value_type = Option<u64>, example = 900000)]
    pub delay_ms: Option<Ms>,
    /// Due at this epoch millisecond (a past instant means now). Excludes `delay_ms`.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    pub run_at_ms: Option<Ms>,
    /// Time to run: how long a consumer may hold the task (default: server setting).
    #[serde(default)]
    #[schema(value_type = Option<u64>, example = 30000)]
    pub ttr_ms: Option<Ms>,
    /// Redeliveries allowed: a count, or -1 for no limit (default: server setting).
    #[serde(default)]
    #[schema(value_type = Option<i64>, example = 3)]
    pub max_retries: Option<MaxRetries>,
    /// Wait before each redelivery after a failure (default: immediate).
    #[serde(default)]
    #[schema(value_type = Option<BackoffSchema>)]
    pub backoff: Option<Backoff>,
    /// What to do if the (topic, id) exists: `reject` (default, 409), `replace`, `keep`.
    #[serde(default)]
    #[schema(value_type = Option<OnDuplicateSchema>)]
    pub on_duplicate: Option<OnDuplicate>,
}

/// A batch add: `{"tasks": [...]}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AddBatchRequest {
    /// The tasks, at most `max_batch` (default 10 000).
    pub tasks: Vec<AddTaskRequest>,
}

/// The body of `POST /add`: one task, or a batch. (For the API description only; the
/// handler tells the two apart by the `tasks` key.)
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum AddRequest {
    /// One task.
    One(AddTaskRequest),
    /// A batch.
    Batch(AddBatchRequest),
}

/// A retry schedule (DESIGN §2 rule 6).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Backoff)]
#[serde(tag = "kind", rename_all = "lowercase")]
#[allow(dead_code)]
pub enum BackoffSchema {
    /// The same wait every time.
    Fixed {
        /// The wait, ms.
        ms: u64,
    },
    /// `base_ms * 2^(n-1)` for the n-th redelivery, at most `max_ms`.
    Exponential {
        /// The first wait, ms.
        base_ms: u64,
        /// The cap, ms.
        max_ms: u64,
    },
    /// The n-th entry for the n-th redelivery; the last one repeats.
    Schedule {
        /// The waits, ms.
        ms: Vec<u64>,
    },
}

/// What `add` does with an existing (topic, id).
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[schema(as = OnDuplicate)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum OnDuplicateSchema {
    /// Refuse with 409 (default).
    Reject,
    /// Replace body, due and options.
    Replace,
    /// Change nothing; answer 200 saying it existed.
    Keep,
}

/// The result of a single add.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AddData {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// `added`, `replaced` or `existed` (a `keep` of an existing task).
    #[schema(example = "added")]
    pub outcome: String,
    /// Whether the task existed before this add.
    pub existed: bool,
}

/// The `data` of `POST /add`: [`AddData`] for one task, a list of [`BatchItem`] for a batch.
/// (For the API description only.)
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum AddResponse {
    /// One task.
    One(AddData),
    /// A batch: one result per task, in order.
    Batch(Vec<BatchItem>),
}

/// The result of one task of a batch add.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct BatchItem {
    /// The task's id.
    pub id: String,
    /// The task's topic.
    pub topic: String,
    /// 0 if added, else the HTTP status this task alone would have got.
    pub code: u16,
    /// `ok`, or what went wrong.
    pub message: String,
    /// `added`, `replaced` or `existed`; `null` on failure.
    pub outcome: Option<String>,
}

/// `POST /pop`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct PopRequest {
    /// The topic to take from.
    pub topic: String,
    /// How long to wait for a ready task, ms (default 30 000, at most `max_pop_timeout_ms`,
    /// 60 000 by default). 0 returns at once.
    #[serde(default)]
    #[schema(value_type = Option<u64>, example = 30000)]
    pub timeout_ms: Option<Ms>,
    /// Take up to this many tasks; when given, `data` is a list.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    pub count: Option<Count>,
    /// Finish the tasks as they are handed out (at-most-once).
    #[serde(default)]
    pub auto_finish: Option<bool>,
}

/// A task handed to a consumer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskDelivery {
    /// The id.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The payload.
    pub body: String,
    /// Redeliveries before this attempt.
    pub retries: u32,
    /// The token of this attempt, for finish/release/touch.
    pub receipt: String,
    /// When the task became due, epoch ms.
    pub due_ms: u64,
    /// How long this consumer may hold it, ms.
    pub ttr_ms: u64,
}

impl From<Delivery> for TaskDelivery {
    fn from(d: Delivery) -> Self {
        TaskDelivery {
            id: d.id,
            topic: d.topic,
            body: d.body,
            retries: d.retries,
            receipt: d.receipt,
            due_ms: d.due_ms,
            ttr_ms: d.ttr_ms,
        }
    }
}

/// `POST /finish` and `POST /touch`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AckRequest {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// The receipt of the attempt; a stale one is a 409.
    #[serde(default)]
    pub receipt: Option<String>,
}

/// `POST /release`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ReleaseRequest {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// The receipt of the attempt; a stale one is a 409.
    #[serde(default)]
    pub receipt: Option<String>,
    /// Redeliver after this many ms instead of the task's backoff.
    #[serde(default)]
    #[schema(value_type = Option<u64>)]
    pub delay_ms: Option<Ms>,
    /// What went wrong, kept as the task's last error.
    #[serde(default)]
    pub error: Option<String>,
}

/// The result of `POST /release`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReleaseData {
    /// The new state's code: 0 delayed, 1 ready, 5 dead.
    pub state: u8,
    /// The new state's name.
    pub state_name: String,
}

/// The result of `POST /touch`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TouchData {
    /// The new ttr deadline, epoch ms.
    pub deadline_ms: u64,
}

/// `POST /cancel` and `POST /delete`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TaskKey {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
}

/// `POST /requeue`: one task (`id`) or every dead task of the topic (`all: true`).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct RequeueRequest {
    /// The topic.
    pub topic: String,
    /// The id of one dead task.
    #[serde(default)]
    pub id: Option<String>,
    /// Requeue every dead task of the topic.
    #[serde(default)]
    pub all: Option<bool>,
}

/// The result of `POST /requeue`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RequeueData {
    /// How many tasks went from DEAD to READY.
    pub requeued: u64,
}

/// `GET /get` parameters.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GetQuery {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
}

/// `GET /tasks` parameters.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TasksQuery {
    /// The topic.
    pub topic: String,
    /// Only tasks in this state, by name (`ready`) or code (`1`).
    #[serde(default)]
    pub state: Option<String>,
    /// The page, from 1 (default 1).
    #[serde(default)]
    pub page: Option<u64>,
    /// Tasks per page (default 100, at most `max_page_size`, 1000 by default).
    #[serde(default)]
    pub page_size: Option<u64>,
}

/// `GET /stats` parameters.
#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// One topic; without it, every topic.
    #[serde(default)]
    pub topic: Option<String>,
}

/// One failed attempt of a task.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptView {
    /// When the attempt started, epoch ms.
    pub started_at_ms: u64,
    /// When it ended, epoch ms.
    pub ended_at_ms: u64,
    /// How it ended: `released`, `ttr_expired`.
    pub outcome: String,
    /// The error the consumer reported.
    pub error: Option<String>,
}

/// The full view of a task (`GET /get`, `GET /tasks`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskView {
    /// The id.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The payload.
    pub body: String,
    /// The state's code: 0 delayed, 1 ready, 2 active, 3 finished, 4 cancelled, 5 dead.
    pub state: u8,
    /// The state's name.
    #[schema(example = "delayed")]
    pub state_name: String,
    /// When the task is (or was) due, epoch ms.
    pub due_ms: u64,
    /// The delay it was added with, ms.
    pub delay_ms: u64,
    /// Time to run, ms.
    pub ttr_ms: u64,
    /// Redeliveries allowed (-1: no limit).
    pub max_retries: i64,
    /// Redeliveries so far.
    pub retries: u32,
    /// When it was added, epoch ms.
    pub created_at_ms: u64,
    /// When it last changed state, epoch ms.
    pub updated_at_ms: u64,
    /// The retry schedule.
    #[schema(value_type = Option<BackoffSchema>)]
    pub backoff: Option<Backoff>,
    /// While ACTIVE the ttr deadline; while FINISHED or CANCELLED when the record goes.
    pub deadline_ms: Option<u64>,
    /// The last error a consumer reported.
    pub last_error: Option<String>,
    /// The failed attempts, oldest first.
    pub history: Vec<AttemptView>,
}

impl From<TaskInfo> for TaskView {
    fn from(t: TaskInfo) -> Self {
        TaskView {
            id: t.id,
            topic: t.topic,
            body: t.body,
            state: t.state.code(),
            state_name: t.state.name().to_owned(),
            due_ms: t.due_ms,
            delay_ms: t.delay_ms,
            ttr_ms: t.ttr_ms,
            max_retries: t.max_retries,
            retries: t.retries,
            created_at_ms: t.created_at_ms,
            updated_at_ms: t.updated_at_ms,
            backoff: t.backoff,
            deadline_ms: t.deadline_ms,
            last_error: t.last_error,
            history: t
                .history
                .into_iter()
                .map(|a| AttemptView {
                    started_at_ms: a.started_at_ms,
                    ended_at_ms: a.ended_at_ms,
                    outcome: a.outcome,
                    error: a.error,
                })
                .collect(),
        }
    }
}

/// One page of tasks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskPage {
    /// The tasks of this page, by due time.
    pub items: Vec<TaskView>,
    /// How many tasks match in all.
    pub total: u64,
    /// The page, from 1.
    pub page: u64,
    /// The page size.
    pub page_size: u64,
}

/// The counters of one topic.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct StatsView {
    /// Waiting for their due time.
    pub delayed: u64,
    /// Waiting for a consumer.
    pub ready: u64,
    /// Held by consumers.
    pub active: u64,
    /// Out of retries.
    pub dead: u64,
    /// Finished, still retained.
    pub finished: u64,
    /// Cancelled, still retained.
    pub cancelled: u64,
    /// All records.
    pub total: u64,
    /// The earliest due time among delayed tasks, epoch ms.
    pub next_due_ms: Option<u64>,
}

impl From<TopicStats> for StatsView {
    fn from(s: TopicStats) -> Self {
        StatsView {
            delayed: s.delayed,
            ready: s.ready,
            active: s.active,
            dead: s.dead,
            finished: s.finished,
            cancelled: s.cancelled,
            total: s.total,
            next_due_ms: s.next_due_ms,
        }
    }
}

/// One topic and its counters.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TopicEntry {
    /// The topic.
    pub name: String,
    /// Its counters.
    pub stats: StatsView,
}

/// The result of `GET /topics`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TopicList {
    /// The topics with records, by name.
    pub topics: Vec<TopicEntry>,
    /// How many.
    pub total: u64,
}

/// No result: the `data` of a success that returns nothing is `null`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct NoData;

/// The result of `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Health {
    /// `alive` or `ready`.
    pub status: String,
}

/// The state names accepted by `GET /tasks?state=`.
pub fn state_names() -> String {
    State::ALL
        .iter()
        .map(|s| format!("{} ({})", s.name(), s.code()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_must_be_whole_and_non_negative() {
        let table: [(&str, Option<u64>); 7] = [
            ("0", Some(0)),
            ("5000", Some(5_000)),
            ("18446744073709551615", Some(u64::MAX)),
            ("-1", None),
            ("1.5", None),
            ("1e30", None),
            ("18446744073709551616", None),
        ];
        for (json, want) in table {
            let got = serde_json::from_str::<Ms>(json).ok().map(|m| m.0);
            assert_eq!(got, want, "{json}");
        }
        let err = serde_json::from_str::<Ms>("-1").unwrap_err().to_string();
        assert!(err.contains("whole number of milliseconds"), "{err}");
    }

    #[test]
    fn body_accepts_text_and_json() {
        let table = [
            (r#""plain""#, "plain"),
            (r#"{"order_id":"123"}"#, r#"{"order_id":"123"}"#),
            ("[1,2]", "[1,2]"),
            ("42", "42"),
        ];
        for (json, want) in table {
            assert_eq!(serde_json::from_str::<BodyText>(json).unwrap().0, want);
        }
    }
}
