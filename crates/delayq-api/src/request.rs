//! What clients send: request bodies and query strings, and how each becomes a library call.
//!
//! Field names are seqdelay's (`topic`, `id`, `body`, `delay_ms`, `ttr_ms`, `max_retries`,
//! `timeout_ms`, `page`, `page_size`, `state`); delayq's additions sit beside them. Every
//! optional field is left out when unset, so what the client sends is only what its caller
//! set. Unknown fields are ignored when reading.

use delayq_core::validate;
use delayq_core::{
    Backoff, BuryOptions, Expiry, InvalidField, MaxRetries, NewTask, OnDuplicate, OnExpire, State,
    When,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::body::{BodyEncoding, decode_body, encode_body};
use crate::limits::DEFAULT_PAGE_SIZE;
use crate::number::{BodyText, Count, WholeMillis};
use crate::trace::{trace_fields, trace_of};

/// The name of the list of a batch (`/add` or `/finish`), and the prefix of its fields in
/// errors.
pub const BATCH_FIELD: &str = "tasks";

/// The name of field `field` of the `index`-th task of a batch (`tasks[3].delay_ms`): the one
/// place the HTTP edge names a batch's fields.
pub fn batch_field(index: usize, field: &str) -> String {
    format!("{BATCH_FIELD}[{index}].{field}")
}

/// One task to add (`POST /add`, or an element of `tasks`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct AddTaskRequest {
    /// The queue: `[A-Za-z0-9._:+/;$()-]{1,200}`.
    #[schema(example = "order-auto-cancel")]
    pub topic: String,
    /// The caller's id, unique in the topic: `[A-Za-z0-9._:@/+=-]{1,256}`.
    #[schema(example = "cancel-123")]
    pub id: String,
    /// The payload: text (a JSON object or array is stored as its JSON text), or base64 of
    /// any bytes with `body_encoding: "base64"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "{\"order_id\":\"123\"}")]
    pub body: Option<BodyText>,
    /// How `body` is written: `text` (default) or `base64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_encoding: Option<BodyEncoding>,
    /// Lower first, 0 to 4294967295 (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = 1024)]
    pub priority: Option<u32>,
    /// Due this many ms after arrival (default 0). Excludes `run_at_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 900000)]
    pub delay_ms: Option<WholeMillis>,
    /// Due at this epoch millisecond (a past instant means now). Excludes `delay_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub run_at_ms: Option<WholeMillis>,
    /// Time to run: how long a consumer may hold the task (default: server setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 30000)]
    pub ttr_ms: Option<WholeMillis>,
    /// Redeliveries allowed: a count, or -1 for no limit (default: server setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>, example = 3)]
    pub max_retries: Option<MaxRetries>,
    /// Wait before each redelivery after a failure (default: immediate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// What to do if the (topic, id) exists: `reject` (default, 409), `replace`, `keep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_duplicate: Option<OnDuplicate>,
    /// The W3C `traceparent` of the producer's span this task continues (overrides the
    /// request's `traceparent` header); stored with the task and handed to its consumers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent` (at most 512 bytes, 32 members).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// Expires at this epoch millisecond unless handed out before: it then goes DEAD with
    /// the last error `expired` (or is deleted, see `on_expire`). Must come after the due;
    /// an ACTIVE task is never cut short. Excludes `expires_in_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub expires_at_ms: Option<WholeMillis>,
    /// Expires this many ms after arrival (like `delay_ms`) unless handed out before.
    /// Excludes `expires_at_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 3600000)]
    pub expires_in_ms: Option<WholeMillis>,
    /// What an expiry does: `dead` (default: DEAD with last error `expired`) or `drop`
    /// (the task is deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expire: Option<OnExpire>,
    /// The flow-control key (`[A-Za-z0-9._:@/+=-]{1,256}`, e.g. a merchant id): the topic's
    /// `max_active_per_key` bounds the ACTIVE tasks of one key (docs/flow-control.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "merchant-42")]
    pub key: Option<String>,
}

impl AddTaskRequest {
    /// The library's task, checking what only the wire form can get wrong (both `delay_ms`
    /// and `run_at_ms`). Everything else is checked by the queue against its limits.
    pub fn into_new_task(self) -> Result<NewTask, InvalidField> {
        let mut task = NewTask::new(self.topic, self.id);
        if let Some(body) = self.body {
            task = task.body(decode_body(body.0, self.body_encoding, "body")?);
        }
        if let Some(priority) = self.priority {
            task = task.priority(priority);
        }
        match when_of(self.delay_ms, self.run_at_ms)? {
            Some(When::Delay(delay)) => task = task.delay_ms(delay),
            Some(When::At(at)) => task = task.run_at_ms(at),
            None => {}
        }
        if let Some(ttr) = self.ttr_ms {
            task = task.ttr_ms(ttr.0);
        }
        if let Some(max) = self.max_retries {
            task = task.max_retries(max);
        }
        if let Some(backoff) = self.backoff {
            task = task.backoff(backoff);
        }
        if let Some(policy) = self.on_duplicate {
            task = task.on_duplicate(policy);
        }
        if let Some(trace) = trace_of(self.traceparent.as_deref(), self.tracestate.as_deref())? {
            task = task.trace(trace);
        }
        task.expiry = expiry_of(self.expires_at_ms, self.expires_in_ms)?;
        if let Some(policy) = self.on_expire {
            task = task.on_expire(policy);
        }
        task.key = self.key;
        Ok(task)
    }
}

/// The wire fields of an expiry: `(expires_at_ms, expires_in_ms)`, at most one of them set.
pub fn expiry_fields(expiry: Option<Expiry>) -> (Option<WholeMillis>, Option<WholeMillis>) {
    match expiry {
        Some(Expiry::At(at)) => (Some(WholeMillis(at)), None),
        Some(Expiry::In(ms)) => (None, Some(WholeMillis(ms))),
        None => (None, None),
    }
}

/// The expiry that `expires_at_ms` and `expires_in_ms` give; both at once are refused.
fn expiry_of(
    at: Option<WholeMillis>,
    within: Option<WholeMillis>,
) -> Result<Option<Expiry>, InvalidField> {
    match (at, within) {
        (Some(_), Some(_)) => Err(InvalidField::new(
            "expires_in_ms",
            "cannot be given together with expires_at_ms; give one of them",
        )),
        (Some(at), None) => Ok(Some(Expiry::At(at.0))),
        (None, Some(ms)) => Ok(Some(Expiry::In(ms.0))),
        (None, None) => Ok(None),
    }
}

/// The wire fields of a due: `(delay_ms, run_at_ms)`, one of them set.
pub fn when_fields(when: When) -> (Option<WholeMillis>, Option<WholeMillis>) {
    match when {
        When::Delay(ms) => (Some(WholeMillis(ms)), None),
        When::At(at) => (None, Some(WholeMillis(at))),
    }
}

/// The due that `delay_ms` and `run_at_ms` give, `None` when neither is given; both at once
/// are refused.
fn when_of(
    delay_ms: Option<WholeMillis>,
    run_at_ms: Option<WholeMillis>,
) -> Result<Option<When>, InvalidField> {
    match (delay_ms, run_at_ms) {
        (Some(_), Some(_)) => Err(InvalidField::new(
            "run_at_ms",
            "cannot be given together with delay_ms; give one of them",
        )),
        (Some(delay), None) => Ok(Some(When::Delay(delay.0))),
        (None, Some(at)) => Ok(Some(When::At(at.0))),
        (None, None) => Ok(None),
    }
}

impl From<&NewTask> for AddTaskRequest {
    fn from(task: &NewTask) -> Self {
        let (delay_ms, run_at_ms) = when_fields(task.when);
        let (body, body_encoding) = encode_body(task.body.clone());
        let (traceparent, tracestate) = trace_fields(task.trace.as_ref());
        let (expires_at_ms, expires_in_ms) = expiry_fields(task.expiry);
        AddTaskRequest {
            topic: task.topic.clone(),
            id: task.id.clone(),
            body: Some(BodyText(body)),
            body_encoding,
            priority: task.priority,
            delay_ms,
            run_at_ms,
            ttr_ms: task.ttr_ms.map(WholeMillis),
            max_retries: task.max_retries,
            backoff: task.backoff.clone(),
            on_duplicate: (task.on_duplicate != OnDuplicate::Reject).then_some(task.on_duplicate),
            traceparent,
            tracestate,
            expires_at_ms,
            expires_in_ms,
            on_expire: (task.on_expire != OnExpire::Dead).then_some(task.on_expire),
            key: task.key.clone(),
        }
    }
}

/// A batch add: `{"tasks": [...]}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AddBatchRequest {
    /// The tasks, at most `max_batch` (default 10 000).
    pub tasks: Vec<AddTaskRequest>,
}

/// The body of `POST /add`: one task, or a batch, told apart by the `tasks` key. (The server
/// reads the two forms apart, with [`AddRequest::is_batch`], so that an error names the field
/// of the form that was meant.)
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AddRequest {
    // Boxed: a task's fields are much larger than a batch's list.
    /// One task.
    One(Box<AddTaskRequest>),
    /// A batch.
    Batch(AddBatchRequest),
}

impl AddRequest {
    /// Whether a body is a batch: an object with a `tasks` key that is not null. A body that
    /// is not even JSON is not a batch; reading it as one task then reports the error.
    pub fn is_batch(body: &[u8]) -> bool {
        has_batch_key(body)
    }
}

/// Whether a body is an object with a `tasks` key that is not null: the mark of a batch, for
/// `/add` and `/finish` alike. A body that is not even JSON is not a batch.
///
/// A body in which the bytes `tasks` do not occur and that holds no `\` (a key may spell
/// itself with escapes, `"ta\u0073ks"`) cannot have that key, so it is not read at all: the
/// probe is a whole second parse, more than half of what the task's own parse costs. The word
/// is looked for first: a batch names it in its first bytes, and its tasks (up to the body
/// limit) need not be scanned for a backslash.
fn has_batch_key(body: &[u8]) -> bool {
    if memchr::memmem::find(body, b"tasks").is_none() && memchr::memchr(b'\\', body).is_none() {
        return false;
    }
    probe_batch_key(body)
}

/// [`has_batch_key`] by parsing.
fn probe_batch_key(body: &[u8]) -> bool {
    // serde reads a struct from an array too, by position: `[{...}]` would fill `tasks`.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return false;
    }
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        tasks: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(body).is_ok_and(|p| p.tasks.is_some())
}

/// `POST /pop`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct PopRequest {
    /// The topic to take from.
    pub topic: String,
    /// How long to wait for a ready task, ms (default 30 000, at most `max_pop_timeout_ms`,
    /// 60 000 by default). 0 returns at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 30000)]
    pub timeout_ms: Option<WholeMillis>,
    /// Take up to this many tasks; when given, `data` is a list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub count: Option<Count>,
    /// Finish the tasks as they are handed out (at-most-once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_finish: Option<bool>,
    /// Finish this task first, exactly as `POST /finish` would: a consumer's loop of one
    /// request a task. When it fails, its error is the answer and nothing is popped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish: Option<AckRequest>,
    /// Release this task first, exactly as `POST /release` would (not with `finish`). When
    /// it fails, its error is the answer and nothing is popped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseRequest>,
}

/// `POST /finish` and `POST /touch`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct AckRequest {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// The receipt of the attempt; a stale one is a 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
}

/// A batch finish: `{"tasks": [{topic, id, receipt?}, ...]}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct FinishBatchRequest {
    /// The tasks to finish, at most `max_batch` (default 10 000); each gets its own result.
    pub tasks: Vec<AckRequest>,
}

/// The body of `POST /finish`: one task, or a batch, told apart by the `tasks` key as for
/// `/add` ([`FinishRequest::is_batch`]).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum FinishRequest {
    /// One task.
    One(AckRequest),
    /// A batch.
    Batch(FinishBatchRequest),
}

impl FinishRequest {
    /// Whether a body is a batch: an object with a `tasks` key that is not null.
    pub fn is_batch(body: &[u8]) -> bool {
        has_batch_key(body)
    }
}

/// `POST /release`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ReleaseRequest {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// The receipt of the attempt; a stale one is a 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// Redeliver after this many ms instead of the task's backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub delay_ms: Option<WholeMillis>,
    /// What went wrong, kept as the task's last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A new priority for the task from now on, 0 to 4294967295 (lower first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

/// `POST /bury`: the holder gives up on its task, ACTIVE → DEAD (docs/design.md §2 rule 13).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct BuryRequest {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// The receipt of the attempt; a stale one is a 409.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<String>,
    /// Why, kept as the task's last error (default "buried").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A new priority for the task, 0 to 4294967295 (beanstalkd's `bury <id> <pri>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

impl BuryRequest {
    /// The library's options of this bury.
    pub fn options(&self) -> BuryOptions {
        let mut options = BuryOptions::default();
        if let Some(receipt) = &self.receipt {
            options = options.receipt(receipt.clone());
        }
        if let Some(error) = &self.error {
            options = options.error(error.clone());
        }
        if let Some(priority) = self.priority {
            options = options.priority(priority);
        }
        options
    }
}

/// `POST /reschedule`: a DELAYED or READY task gets a new due (docs/design.md §2 rule 15).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RescheduleRequest {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
    /// Due this many ms from now (0, or neither field: now). Excludes `run_at_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 60000)]
    pub delay_ms: Option<WholeMillis>,
    /// Due at this epoch millisecond (a past instant means now). Excludes `delay_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub run_at_ms: Option<WholeMillis>,
}

impl RescheduleRequest {
    /// The new due as the library takes it; both fields at once are refused, neither means
    /// now.
    pub fn when(&self) -> Result<When, InvalidField> {
        Ok(when_of(self.delay_ms, self.run_at_ms)?.unwrap_or(When::Delay(0)))
    }
}

/// `POST /pause`: a topic hands nothing out until resumed or until `for_ms` has passed
/// (docs/design.md §2 rule 14).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct PauseRequest {
    /// The topic; it need not have tasks yet.
    pub topic: String,
    /// End the pause by itself after this many ms; without it, until `POST /resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 60000)]
    pub for_ms: Option<WholeMillis>,
}

/// `POST /resume`: ends a topic's pause.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TopicRequest {
    /// The topic.
    pub topic: String,
}

/// `POST /cancel` and `POST /delete`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct TaskKey {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
}

/// `POST /requeue`: one task (`id`) or every dead task of the topic (`all: true`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct RequeueRequest {
    /// The topic.
    pub topic: String,
    /// The id of one dead task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Requeue every dead task of the topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
}

/// `GET /get` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GetQuery {
    /// The topic.
    pub topic: String,
    /// The id.
    pub id: String,
}

/// `GET /tasks` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TasksQuery {
    /// The topic.
    pub topic: String,
    /// Only tasks in this state, by name (`ready`) or code (`1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The page, from 1 (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u64>,
    /// Tasks per page (default 100). A larger value than `max_page_size` (1000 by default) is
    /// clamped to it, as seqdelay clamps; the answer's `page_size` says what was used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<u64>,
}

impl TasksQuery {
    /// The state asked for, if any: a name or a code; an empty value means every state.
    pub fn state_filter(&self) -> Result<Option<State>, InvalidField> {
        match self.state.as_deref().map(str::trim) {
            None | Some("") => Ok(None),
            Some(text) => validate::parse_state("state", text).map(Some),
        }
    }

    /// The page (from 1) and the page size, the size defaulted and clamped to `max`.
    pub fn page_and_size(&self, max: u64) -> Result<(u64, u64), InvalidField> {
        let page = self.page.unwrap_or(1);
        if page == 0 {
            return Err(InvalidField::new("page", "is 0, pages count from 1"));
        }
        let size = match self.page_size {
            None => DEFAULT_PAGE_SIZE,
            Some(0) => {
                return Err(InvalidField::new(
                    "page_size",
                    format!("is 0, it must be 1 or more (at most {max} are returned)"),
                ));
            }
            Some(size) => size,
        };
        Ok((page, size.min(max)))
    }
}

/// `GET /stats` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StatsQuery {
    /// One topic; without it, every topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_request_writes_only_what_is_set() {
        let task = NewTask::new("orders", "o-1").body("{}").delay_ms(900_000);
        let json = serde_json::to_string(&AddTaskRequest::from(&task)).unwrap();
        assert_eq!(
            json,
            r#"{"topic":"orders","id":"o-1","body":"{}","delay_ms":900000}"#
        );
        let task = NewTask::new("orders", "o-2")
            .run_at_ms(1_700_000_000_000)
            .ttr_ms(5_000)
            .max_retries(MaxRetries::Unlimited)
            .backoff(Backoff::Schedule {
                ms: vec![120_000, 600_000],
            })
            .on_duplicate(OnDuplicate::Replace);
        let json = serde_json::to_string(&AddTaskRequest::from(&task)).unwrap();
        assert_eq!(
            json,
            r#"{"topic":"orders","id":"o-2","body":"","run_at_ms":1700000000000,"ttr_ms":5000,"max_retries":-1,"backoff":{"kind":"schedule","ms":[120000,600000]},"on_duplicate":"replace"}"#
        );
    }

    #[test]
    fn a_request_becomes_the_same_task_it_came_from() {
        let task = NewTask::new("orders", "o-3")
            .body("x")
            .delay_ms(5)
            .ttr_ms(7)
            .max_retries(MaxRetries::Limited(0))
            .on_duplicate(OnDuplicate::Keep);
        let back = AddTaskRequest::from(&task).into_new_task().unwrap();
        assert_eq!(back, task);
    }

    #[test]
    fn an_expiry_goes_over_the_wire_and_back() {
        for task in [
            NewTask::new("t", "a")
                .expires_in_ms(60_000)
                .on_expire(OnExpire::Drop),
            NewTask::new("t", "b").expires_at_ms(1_800_000_000_000),
        ] {
            let back = AddTaskRequest::from(&task).into_new_task().unwrap();
            assert_eq!(back, task);
        }
        let json = serde_json::to_value(AddTaskRequest::from(
            &NewTask::new("t", "a")
                .expires_in_ms(5)
                .on_expire(OnExpire::Drop),
        ))
        .unwrap();
        assert_eq!(
            (&json["expires_in_ms"], &json["on_expire"]),
            (&serde_json::json!(5), &serde_json::json!("drop"))
        );
        let plain = serde_json::to_value(AddTaskRequest::from(&NewTask::new("t", "c"))).unwrap();
        assert!(plain.get("on_expire").is_none() && plain.get("expires_in_ms").is_none());
        let both: AddTaskRequest =
            serde_json::from_str(r#"{"topic":"t","id":"i","expires_in_ms":5,"expires_at_ms":9}"#)
                .unwrap();
        assert_eq!(both.into_new_task().unwrap_err().field, "expires_in_ms");
    }

    #[test]
    fn delay_and_run_at_exclude_each_other() {
        let req: AddTaskRequest =
            serde_json::from_str(r#"{"topic":"t","id":"i","delay_ms":5,"run_at_ms":9}"#).unwrap();
        let err = req.into_new_task().unwrap_err();
        assert_eq!(err.field, "run_at_ms");
        assert!(err.reason.contains("delay_ms"));
    }

    #[test]
    fn reschedule_reads_one_due_or_now() {
        let read = |body: &str| {
            serde_json::from_str::<RescheduleRequest>(body)
                .unwrap()
                .when()
        };
        assert_eq!(read(r#"{"topic":"t","id":"i"}"#), Ok(When::Delay(0)));
        assert_eq!(
            read(r#"{"topic":"t","id":"i","delay_ms":5}"#),
            Ok(When::Delay(5))
        );
        assert_eq!(
            read(r#"{"topic":"t","id":"i","run_at_ms":9}"#),
            Ok(When::At(9))
        );
        let err = read(r#"{"topic":"t","id":"i","delay_ms":5,"run_at_ms":9}"#).unwrap_err();
        assert_eq!(err.field, "run_at_ms");
    }

    #[test]
    fn bury_options_carry_what_was_given() {
        let req: BuryRequest =
            serde_json::from_str(r#"{"topic":"t","id":"i","receipt":"r","priority":3}"#).unwrap();
        assert_eq!(
            req.options(),
            BuryOptions::default().receipt("r").priority(3)
        );
        let bare: BuryRequest = serde_json::from_str(r#"{"topic":"t","id":"i"}"#).unwrap();
        assert_eq!(bare.options(), BuryOptions::default());
    }

    #[test]
    fn batch_is_told_apart_by_the_tasks_key() {
        let table: [(&str, bool); 5] = [
            (r#"{"tasks": []}"#, true),
            (r#"{"topic": "t", "id": "i", "tasks": [{}]}"#, true),
            (r#"{"topic": "t", "id": "i"}"#, false),
            (r#"{"tasks": null}"#, false),
            ("not json", false),
        ];
        for (body, want) in table {
            assert_eq!(AddRequest::is_batch(body.as_bytes()), want, "{body}");
        }
        assert_eq!(batch_field(3, "delay_ms"), "tasks[3].delay_ms");
        // The look for `tasks` without parsing must not miss a key spelled with escapes, nor
        // take the word inside a value for the key.
        let table: [(&str, bool); 7] = [
            (r#"{"ta\u0073ks": [{}]}"#, true),
            (r#"{"\u0074asks": []}"#, true),
            (r#"{"topic": "t", "id": "tasks", "body": "tasks"}"#, false),
            (
                r#"{"topic": "t", "id": "a", "body": "a \"quoted\" body"}"#,
                false,
            ),
            (r#"{"topic": "t", "id": "a", "tasks" : [ ]}"#, true),
            // An array is no object, so no batch (the handlers refuse it either way).
            (r#"[{"topic": "t"}]"#, false),
            (r#"  [{"tasks": []}]"#, false),
        ];
        for (body, want) in table {
            assert_eq!(AddRequest::is_batch(body.as_bytes()), want, "{body}");
        }
        let batch: AddRequest =
            serde_json::from_str(r#"{"tasks": [{"topic": "t", "id": "a"}]}"#).unwrap();
        assert!(matches!(batch, AddRequest::Batch(b) if b.tasks.len() == 1));
        let one: AddRequest = serde_json::from_str(r#"{"topic": "t", "id": "a"}"#).unwrap();
        assert!(matches!(one, AddRequest::One(t) if t.id == "a"));
    }

    #[test]
    fn finish_batch_reads_and_writes_like_add_batch() {
        let body =
            r#"{"tasks": [{"topic": "t", "id": "a", "receipt": "r1"}, {"topic": "t", "id": "b"}]}"#;
        assert!(FinishRequest::is_batch(body.as_bytes()));
        assert!(!FinishRequest::is_batch(br#"{"topic": "t", "id": "a"}"#));
        let batch: FinishRequest = serde_json::from_str(body).unwrap();
        let FinishRequest::Batch(batch) = batch else {
            panic!("a batch read as one task")
        };
        assert_eq!(batch.tasks[0].receipt.as_deref(), Some("r1"));
        assert_eq!(batch.tasks[1].receipt, None);
        let written = serde_json::to_string(&FinishRequest::Batch(batch)).unwrap();
        assert_eq!(
            written,
            r#"{"tasks":[{"topic":"t","id":"a","receipt":"r1"},{"topic":"t","id":"b"}]}"#
        );
    }

    #[test]
    fn page_size_is_defaulted_and_clamped_like_seqdelay() {
        let q = |page: Option<u64>, size: Option<u64>| TasksQuery {
            topic: "t".into(),
            page,
            page_size: size,
            ..TasksQuery::default()
        };
        // (page, page_size) asked → (page, page_size) used, or the field refused.
        type Case = (Option<u64>, Option<u64>, Result<(u64, u64), &'static str>);
        let table: [Case; 6] = [
            (None, None, Ok((1, DEFAULT_PAGE_SIZE))),
            (Some(3), Some(20), Ok((3, 20))),
            (None, Some(1000), Ok((1, 1000))),
            (None, Some(1010), Ok((1, 1000))),
            (Some(0), None, Err("page")),
            (None, Some(0), Err("page_size")),
        ];
        for (page, size, want) in table {
            let got = q(page, size).page_and_size(1000).map_err(|e| e.field);
            assert_eq!(got, want.map_err(str::to_owned), "{page:?} {size:?}");
        }
        assert_eq!(q(None, Some(50)).page_and_size(10), Ok((1, 10)));
    }

    #[test]
    fn state_filter_by_name_or_code() {
        let q = |s: &str| TasksQuery {
            topic: "t".into(),
            state: Some(s.into()),
            ..TasksQuery::default()
        };
        assert_eq!(q("ready").state_filter(), Ok(Some(State::Ready)));
        assert_eq!(q("5").state_filter(), Ok(Some(State::Dead)));
        assert_eq!(q(" ").state_filter(), Ok(None));
        let err = q("sleeping").state_filter().unwrap_err();
        assert_eq!(err.field, "state");
        assert!(err.reason.contains("delayed (0)"), "{}", err.reason);
    }

    proptest::proptest! {
        /// Looking for the key without parsing says what parsing says, for objects built of
        /// the pieces that matter: the key plain and spelled with escapes, the word in values,
        /// null and non-null values, and broken JSON.
        #[test]
        fn the_batch_key_is_found_as_a_parse_finds_it(
            head in proptest::sample::select(vec![
                r#"{"tasks": "#, r#"{"ta\u0073ks": "#, r#"{"topic": "t", "id": "#,
                r#"{"body": "tasks", "x": "#, r#"{"body": "a \"b\"", "x": "#, "{", "",
            ]),
            value in proptest::sample::select(vec![
                "[]", "null", "1", r#""tasks""#, "{}", r#"[{"topic": "t"}]"#, "",
            ]),
            tail in proptest::sample::select(vec![
                "}", r#", "tasks": null}"#, r#", "ta\u0073ks": []}"#, r#", "tasks": [{}]}"#,
                "]", "",
            ]),
        ) {
            let body = format!("{head}{value}{tail}");
            proptest::prop_assert_eq!(
                has_batch_key(body.as_bytes()),
                probe_batch_key(body.as_bytes()),
                "{}", body
            );
        }
    }
}
