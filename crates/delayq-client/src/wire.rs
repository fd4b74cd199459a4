//! The JSON shapes of the HTTP API (DESIGN §3), as the client sends and reads them.
//!
//! Requests are small borrowed structs serialized straight from the caller's values. Answers
//! are read into the core types where their JSON matches, and through a private mirror where it
//! does not: the API writes a task's `state` as seqdelay's numeric code (with `state_name`
//! next to it), while [`State`] itself serializes by name, so [`WireTaskInfo`] accepts both.

use delayq_core::{
    AddOutcome, Attempt, Backoff, Delivery, Millis, NewTask, OnDuplicate, Page, State, TaskInfo,
    TopicStats, When,
};
use serde::{Deserialize, Deserializer, Serialize};

use crate::{BatchItem, BatchItemError};

/// The envelope of every answer: `{"code": 0 | status, "message": "...", "data": ...}`.
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope<T> {
    /// 0 on success, the HTTP status otherwise.
    pub code: i64,
    /// What happened, in words.
    #[serde(default)]
    pub message: String,
    /// The payload; absent or null when there is none.
    #[serde(default = "none")]
    pub data: Option<T>,
}

fn none<T>() -> Option<T> {
    None
}

/// The body of `POST /add` for one task.
#[derive(Debug, Serialize)]
pub(crate) struct AddBody<'a> {
    pub topic: &'a str,
    pub id: &'a str,
    pub body: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<Millis>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff: Option<&'a Backoff>,
    #[serde(skip_serializing_if = "is_reject")]
    pub on_duplicate: OnDuplicate,
}

fn is_reject(policy: &OnDuplicate) -> bool {
    *policy == OnDuplicate::Reject
}

impl<'a> From<&'a NewTask> for AddBody<'a> {
    fn from(task: &'a NewTask) -> Self {
        let (delay_ms, run_at_ms) = match task.when {
            When::Delay(ms) => (Some(ms), None),
            When::At(at) => (None, Some(at)),
        };
        AddBody {
            topic: &task.topic,
            id: &task.id,
            body: &task.body,
            delay_ms,
            run_at_ms,
            ttr_ms: task.ttr_ms,
            max_retries: task.max_retries.map(|m| m.as_i64()),
            backoff: task.backoff.as_ref(),
            on_duplicate: task.on_duplicate,
        }
    }
}

/// The body of `POST /add` for a batch.
#[derive(Debug, Serialize)]
pub(crate) struct BatchBody<'a> {
    pub tasks: Vec<AddBody<'a>>,
}

/// The body of `POST /pop`.
#[derive(Debug, Serialize)]
pub(crate) struct PopBody<'a> {
    pub topic: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    pub count: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub auto_finish: bool,
}

/// The body of `POST /finish`, `/touch`, `/cancel`, `/requeue` and `/delete`.
#[derive(Debug, Serialize)]
pub(crate) struct TaskRef<'a> {
    pub topic: &'a str,
    pub id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<&'a str>,
}

/// The body of `POST /release`.
#[derive(Debug, Serialize)]
pub(crate) struct ReleaseBody<'a> {
    pub topic: &'a str,
    pub id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
}

/// The body of `POST /requeue` with `all: true`.
#[derive(Debug, Serialize)]
pub(crate) struct RequeueAllBody<'a> {
    pub topic: &'a str,
    pub all: bool,
}

/// The `data` of `/pop`: one task when no count was given, a list when one was.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum OneOrMany {
    Many(Vec<Delivery>),
    One(Box<Delivery>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<Delivery> {
        match self {
            OneOrMany::Many(list) => list,
            OneOrMany::One(one) => vec![*one],
        }
    }
}

/// A task as the API writes it (`state` as a code or a name).
#[derive(Debug, Deserialize)]
pub(crate) struct WireTaskInfo {
    id: String,
    topic: String,
    #[serde(default)]
    body: String,
    #[serde(deserialize_with = "state_code_or_name")]
    state: State,
    due_ms: Millis,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    ttr_ms: u64,
    #[serde(default)]
    max_retries: i64,
    #[serde(default)]
    retries: u32,
    #[serde(default)]
    created_at_ms: Millis,
    #[serde(default)]
    updated_at_ms: Millis,
    #[serde(default)]
    backoff: Option<Backoff>,
    #[serde(default)]
    deadline_ms: Option<Millis>,
    #[serde(default)]
    last_error: Option<String>,
    #[serde(default)]
    history: Vec<Attempt>,
}

impl From<WireTaskInfo> for TaskInfo {
    fn from(w: WireTaskInfo) -> Self {
        TaskInfo {
            id: w.id,
            topic: w.topic,
            body: w.body,
            state: w.state,
            due_ms: w.due_ms,
            delay_ms: w.delay_ms,
            ttr_ms: w.ttr_ms,
            max_retries: w.max_retries,
            retries: w.retries,
            created_at_ms: w.created_at_ms,
            updated_at_ms: w.updated_at_ms,
            backoff: w.backoff,
            deadline_ms: w.deadline_ms,
            last_error: w.last_error,
            history: w.history,
        }
    }
}

/// A page of tasks as the API writes it.
#[derive(Debug, Deserialize)]
pub(crate) struct WirePage {
    items: Vec<WireTaskInfo>,
    total: u64,
    page: u64,
    page_size: u64,
}

impl From<WirePage> for Page<TaskInfo> {
    fn from(w: WirePage) -> Self {
        Page {
            items: w.items.into_iter().map(TaskInfo::from).collect(),
            total: w.total,
            page: w.page,
            page_size: w.page_size,
        }
    }
}

/// One entry of `/topics`.
#[derive(Debug, Deserialize)]
pub(crate) struct WireTopic {
    pub name: String,
    pub stats: TopicStats,
}

/// The `data` of `/topics`.
#[derive(Debug, Deserialize)]
pub(crate) struct WireTopics {
    pub topics: Vec<WireTopic>,
}

/// The `data` of `/release`: the task's new state.
#[derive(Debug, Deserialize)]
pub(crate) struct StateData {
    #[serde(deserialize_with = "state_code_or_name")]
    pub state: State,
}

/// The `data` of `/touch`: the new ttr deadline.
#[derive(Debug, Deserialize)]
pub(crate) struct DeadlineData {
    pub deadline_ms: Millis,
}

/// Reads a [`State`] written as seqdelay's numeric code (`1`) or by name (`"ready"`).
pub(crate) fn state_code_or_name<'de, D: Deserializer<'de>>(d: D) -> Result<State, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Code(u8),
        Name(String),
    }
    match Raw::deserialize(d)? {
        Raw::Code(code) => State::from_code(code)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown state code {code}"))),
        Raw::Name(name) => State::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown state {name:?}"))),
    }
}

/// The `data` of a single `/add`: `{topic, id, outcome, existed}`.
#[derive(Debug, Deserialize)]
pub(crate) struct AddData {
    pub outcome: String,
}

/// Reads the outcome of a single add. No `data` (seqdelay answers `null`) means added.
pub(crate) fn outcome_of(data: Option<AddData>) -> Result<AddOutcome, String> {
    match data {
        None => Ok(AddOutcome::Added),
        Some(data) => parse_outcome(&data.outcome),
    }
}

/// Parses an outcome word.
pub(crate) fn parse_outcome(word: &str) -> Result<AddOutcome, String> {
    match word {
        "added" => Ok(AddOutcome::Added),
        "replaced" => Ok(AddOutcome::Replaced),
        "existed" => Ok(AddOutcome::Existed),
        other => Err(format!("unknown add outcome {other:?}")),
    }
}

/// One entry of the `data` of a batch `/add`.
#[derive(Debug, Deserialize)]
pub(crate) struct WireBatchItem {
    #[serde(default)]
    id: Option<String>,
    /// 0 if accepted, else the status this task alone would have got.
    code: i64,
    #[serde(default)]
    message: String,
    #[serde(default)]
    outcome: Option<String>,
}

/// Reads the per-task results of a batch `/add`: one entry per task, in order.
pub(crate) fn batch_results(
    data: Option<Vec<WireBatchItem>>,
    expected: usize,
) -> Result<Vec<BatchItem>, String> {
    let list = data.unwrap_or_default();
    if list.len() != expected {
        return Err(format!(
            "the batch answer has {} results for {expected} tasks",
            list.len()
        ));
    }
    list.into_iter()
        .enumerate()
        .map(|(index, item)| {
            let result = if item.code != 0 {
                Err(BatchItemError {
                    code: item.code,
                    message: item.message,
                })
            } else {
                Ok(item
                    .outcome
                    .as_deref()
                    .map(parse_outcome)
                    .transpose()?
                    .unwrap_or(AddOutcome::Added))
            };
            Ok(BatchItem {
                index,
                id: item.id,
                result,
            })
        })
        .collect()
}

/// The `data` of `/requeue`.
#[derive(Debug, Deserialize)]
pub(crate) struct RequeueData {
    pub requeued: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_body_writes_only_what_is_set() {
        let task = NewTask::new("orders", "o-1").body("{}").delay_ms(900_000);
        let json = serde_json::to_string(&AddBody::from(&task)).unwrap();
        assert_eq!(
            json,
            r#"{"topic":"orders","id":"o-1","body":"{}","delay_ms":900000}"#
        );
        let task = NewTask::new("orders", "o-2")
            .run_at_ms(1_700_000_000_000)
            .ttr_ms(5_000)
            .max_retries(delayq_core::MaxRetries::Unlimited)
            .backoff(Backoff::Schedule {
                ms: vec![120_000, 600_000],
            })
            .on_duplicate(OnDuplicate::Replace);
        let json = serde_json::to_string(&AddBody::from(&task)).unwrap();
        assert_eq!(
            json,
            r#"{"topic":"orders","id":"o-2","body":"","run_at_ms":1700000000000,"ttr_ms":5000,"max_retries":-1,"backoff":{"kind":"schedule","ms":[120000,600000]},"on_duplicate":"replace"}"#
        );
    }

    #[test]
    fn task_state_as_code_or_name() {
        for (json_state, expected) in [
            ("0", State::Delayed),
            ("5", State::Dead),
            ("\"ready\"", State::Ready),
        ] {
            let json = format!(
                r#"{{"id":"a","topic":"t","body":"x","state":{json_state},"state_name":"whatever",
                    "due_ms":5,"delay_ms":1,"ttr_ms":2,"max_retries":3,"retries":0,
                    "created_at_ms":4,"updated_at_ms":4,"history":[],"extra":true}}"#
            );
            let task: TaskInfo = serde_json::from_str::<WireTaskInfo>(&json).unwrap().into();
            assert_eq!(task.state, expected, "{json_state}");
            assert_eq!(task.due_ms, 5);
        }
        let bad = r#"{"id":"a","topic":"t","state":9,"due_ms":5}"#;
        let err = serde_json::from_str::<WireTaskInfo>(bad).unwrap_err();
        assert!(err.to_string().contains("unknown state code 9"), "{err}");
    }

    #[test]
    fn pop_data_one_or_many() {
        let one =
            r#"{"id":"a","topic":"t","body":"","retries":0,"receipt":"r","due_ms":1,"ttr_ms":2}"#;
        let many = format!("[{one},{one}]");
        assert_eq!(
            serde_json::from_str::<OneOrMany>(one)
                .unwrap()
                .into_vec()
                .len(),
            1
        );
        assert_eq!(
            serde_json::from_str::<OneOrMany>(&many)
                .unwrap()
                .into_vec()
                .len(),
            2
        );
    }

    #[test]
    fn add_and_batch_answers() {
        let one: AddData =
            serde_json::from_str(r#"{"topic":"t","id":"a","outcome":"existed","existed":true}"#)
                .unwrap();
        assert_eq!(outcome_of(Some(one)), Ok(AddOutcome::Existed));
        assert_eq!(outcome_of(None), Ok(AddOutcome::Added));
        let batch: Vec<WireBatchItem> = serde_json::from_str(
            r#"[{"id":"a","topic":"t","code":0,"message":"ok","outcome":"added"},
                {"id":"b","topic":"t","code":409,"message":"exists","outcome":null}]"#,
        )
        .unwrap();
        let items = batch_results(Some(batch), 2).unwrap();
        assert_eq!(items[0].result, Ok(AddOutcome::Added));
        assert_eq!(
            items[1].result,
            Err(BatchItemError {
                code: 409,
                message: "exists".into()
            })
        );
        assert_eq!(items[1].index, 1);
        assert!(batch_results(Some(Vec::new()), 2).is_err());
    }
}
