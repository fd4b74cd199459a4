//! The views of a task: in full (`GET /get`, [`TaskView`]), as an item of a list
//! (`GET /tasks`, [`TaskListItem`]) and as handed to a consumer (`POST /pop`, [`TaskDelivery`]).
//!
//! [`TaskFields`] holds what both full views share, so a field is added to a task's wire view
//! in one place. Around it each view writes seqdelay's fields the way seqdelay writes them in
//! that endpoint: in `/get` the `state` is the numeric code and `created_at`/`active_at` are
//! RFC 3339 times (seqdelay's Go `time.Time`); in `/tasks` the `state` is the name and
//! `created_at`/`active_at` are epoch milliseconds. Each view also carries the other form of
//! the state (`state_name`, `state_code`) so that no reader has to know which one it got.

use std::ops::{Deref, DerefMut};

use delayq_core::{Attempt, Backoff, OnExpire, State, TaskInfo};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use delayq_core::InvalidField;

use crate::body::{BodyEncoding, decode_body, encode_body};
use crate::state;
use crate::trace::trace_fields;

/// How Go writes a zero `time.Time`: seqdelay's `active_at` of a task never handed out.
pub const ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// The fields every full view of a task has (`/get` and `/tasks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskFields {
    /// The id.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The payload: text, or base64 when `body_encoding` says so.
    pub body: String,
    /// How `body` is written: `text` when the body's bytes are UTF-8, else `base64`. Always
    /// present in answers; read as `text` when absent.
    #[serde(default)]
    pub body_encoding: BodyEncoding,
    /// Lower first.
    pub priority: u32,
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
    pub backoff: Option<Backoff>,
    /// While ACTIVE the ttr deadline; while FINISHED or CANCELLED when the record goes.
    pub deadline_ms: Option<u64>,
    /// The last error a consumer reported.
    pub last_error: Option<String>,
    /// The failed attempts, oldest first.
    pub history: Vec<Attempt>,
    /// The W3C `traceparent` the task was added with (on `/pop`: the delivery's own span
    /// when delayq exports traces, see docs/tracing.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` the task was added with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// When the task expires unless handed out before, epoch ms (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// What its expiry does: `dead` or `drop` (present with `expires_at_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expire: Option<OnExpire>,
    /// The flow-control key, if the task has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl TaskFields {
    /// The body's bytes, decoded from the wire form `body_encoding` names.
    pub fn body_bytes(&self) -> Result<Vec<u8>, InvalidField> {
        decode_body(self.body.clone(), Some(self.body_encoding), "body")
    }
}

impl From<TaskInfo> for TaskFields {
    fn from(t: TaskInfo) -> Self {
        let (body, body_encoding) = encode_body(t.body);
        let (traceparent, tracestate) = trace_fields(t.trace.as_ref());
        TaskFields {
            id: t.id,
            topic: t.topic,
            body,
            body_encoding: body_encoding.unwrap_or_default(),
            priority: t.priority,
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
            history: t.history,
            traceparent,
            tracestate,
            expires_at_ms: t.expires_at_ms,
            on_expire: t.expires_at_ms.map(|_| t.on_expire),
            key: t.key,
        }
    }
}

/// When the task was last handed to a consumer, as seqdelay's `active_at` means it: the start
/// of the current attempt while ACTIVE, else the start of the latest failed attempt. delayq
/// does not keep when a finished task's last attempt started, so that is `None`.
fn active_at_ms(t: &TaskInfo) -> Option<u64> {
    match t.state {
        State::Active => Some(t.updated_at_ms),
        _ => t.history.last().map(|a| a.started_at_ms),
    }
}

/// An epoch millisecond as RFC 3339 in UTC (`2026-11-24T06:30:00.123Z`), as seqdelay's Go
/// `time.Time` fields read it; `None` is Go's zero time.
pub fn rfc3339(ms: Option<u64>) -> String {
    ms.and_then(|ms| i64::try_from(ms).ok())
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| ZERO_TIME.to_owned(), |t| t.to_string())
}

/// A task in full (`GET /get`): `state` is seqdelay's numeric code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    /// What every view of a task has.
    #[serde(flatten)]
    pub task: TaskFields,
    /// The state's code: 0 delayed, 1 ready, 2 active, 3 finished, 4 cancelled, 5 dead.
    #[serde(with = "state::code")]
    #[schema(value_type = u8, example = 0)]
    pub state: State,
    /// The state's name.
    #[serde(with = "state::name")]
    #[schema(value_type = String, example = "delayed")]
    pub state_name: State,
    /// When it was added, RFC 3339 (seqdelay's `created_at`; `created_at_ms` in epoch ms).
    #[schema(example = "2026-11-24T06:30:00.123Z")]
    pub created_at: String,
    /// When it was last handed to a consumer, RFC 3339; `0001-01-01T00:00:00Z` if never (or
    /// not known: see `docs/seqdelay.md`).
    #[schema(example = "0001-01-01T00:00:00Z")]
    pub active_at: String,
}

impl From<TaskInfo> for TaskView {
    fn from(t: TaskInfo) -> Self {
        let (state, created, active) = (t.state, t.created_at_ms, active_at_ms(&t));
        TaskView {
            task: TaskFields::from(t),
            state,
            state_name: state,
            created_at: rfc3339(Some(created)),
            active_at: rfc3339(active),
        }
    }
}

/// A task as an item of `GET /tasks`: `state` is the state's name, as seqdelay writes it in
/// lists, with `state_code` beside it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskListItem {
    /// What every view of a task has.
    #[serde(flatten)]
    pub task: TaskFields,
    /// The state's name: `delayed`, `ready`, `active`, `finished`, `cancelled`, `dead`.
    #[serde(with = "state::name")]
    #[schema(value_type = String, example = "delayed")]
    pub state: State,
    /// The state's code: 0 delayed, 1 ready, 2 active, 3 finished, 4 cancelled, 5 dead.
    #[serde(with = "state::code")]
    #[schema(value_type = u8, example = 0)]
    pub state_code: State,
    /// The state's name (as in every task object).
    #[serde(with = "state::name")]
    #[schema(value_type = String, example = "delayed")]
    pub state_name: State,
    /// When it was added, epoch ms (seqdelay's `created_at`; the same as `created_at_ms`).
    pub created_at: u64,
    /// When it was last handed to a consumer, epoch ms; 0 if never (or not known).
    pub active_at: u64,
}

impl From<TaskInfo> for TaskListItem {
    fn from(t: TaskInfo) -> Self {
        let (state, created, active) = (t.state, t.created_at_ms, active_at_ms(&t));
        TaskListItem {
            task: TaskFields::from(t),
            state,
            state_code: state,
            state_name: state,
            created_at: created,
            active_at: active.unwrap_or(0),
        }
    }
}

// A view is its shared fields plus the seqdelay ones: `view.id` reads as it says.
macro_rules! deref_to_fields {
    ($view:ty) => {
        impl Deref for $view {
            type Target = TaskFields;

            fn deref(&self) -> &TaskFields {
                &self.task
            }
        }

        impl DerefMut for $view {
            fn deref_mut(&mut self) -> &mut TaskFields {
                &mut self.task
            }
        }
    };
}

deref_to_fields!(TaskView);
deref_to_fields!(TaskListItem);

/// One page of `GET /tasks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskPage {
    /// The tasks of this page, by due time.
    pub items: Vec<TaskListItem>,
    /// How many tasks match in all.
    pub total: u64,
    /// The page, from 1.
    pub page: u64,
    /// The page size used (after clamping).
    pub page_size: u64,
}

impl From<delayq_core::Page<TaskInfo>> for TaskPage {
    fn from(p: delayq_core::Page<TaskInfo>) -> Self {
        TaskPage {
            items: p.items.into_iter().map(TaskListItem::from).collect(),
            total: p.total,
            page: p.page,
            page_size: p.page_size,
        }
    }
}

/// A task handed to a consumer (`POST /pop`): seqdelay's `{id, topic, body}` and delayq's
/// attempt fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskDelivery {
    /// The id.
    pub id: String,
    /// The topic.
    pub topic: String,
    /// The payload: text, or base64 when `body_encoding` says so.
    pub body: String,
    /// How `body` is written: `text` when the body's bytes are UTF-8, else `base64`. Always
    /// present in answers; read as `text` when absent.
    #[serde(default)]
    pub body_encoding: BodyEncoding,
    /// Lower first.
    pub priority: u32,
    /// Redeliveries before this attempt.
    pub retries: u32,
    /// The token of this attempt, for finish/release/touch.
    pub receipt: String,
    /// When the task became due, epoch ms.
    pub due_ms: u64,
    /// How long this consumer may hold it, ms.
    pub ttr_ms: u64,
    /// The W3C `traceparent` the task was added with (on `/pop`: the delivery's own span
    /// when delayq exports traces, see docs/tracing.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` the task was added with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// The task's flow-control key (absent: none), as it was added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl TaskDelivery {
    /// The body's bytes, decoded from the wire form `body_encoding` names.
    pub fn body_bytes(&self) -> Result<Vec<u8>, InvalidField> {
        decode_body(self.body.clone(), Some(self.body_encoding), "body")
    }
}

impl From<delayq_core::Delivery> for TaskDelivery {
    fn from(d: delayq_core::Delivery) -> Self {
        let (body, body_encoding) = encode_body(d.body);
        let (traceparent, tracestate) = trace_fields(d.trace.as_ref());
        TaskDelivery {
            id: d.id,
            topic: d.topic,
            body,
            body_encoding: body_encoding.unwrap_or_default(),
            priority: d.priority,
            retries: d.retries,
            receipt: d.receipt,
            due_ms: d.due_ms,
            ttr_ms: d.ttr_ms,
            traceparent,
            tracestate,
            key: d.key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(state: State) -> TaskInfo {
        TaskInfo {
            id: "a".into(),
            topic: "t".into(),
            body: "x".into(),
            priority: 7,
            state,
            due_ms: 1_800_000_060_000,
            delay_ms: 60_000,
            ttr_ms: 30_000,
            max_retries: 3,
            retries: 1,
            created_at_ms: 1_800_000_000_000,
            updated_at_ms: 1_800_000_070_000,
            backoff: None,
            deadline_ms: Some(1_800_000_100_000),
            last_error: None,
            history: vec![Attempt {
                started_at_ms: 1_800_000_061_000,
                ended_at_ms: 1_800_000_062_000,
                outcome: "released".into(),
                error: None,
            }],
            trace: None,
            expires_at_ms: None,
            on_expire: OnExpire::Dead,
            key: None,
        }
    }

    #[test]
    fn get_view_writes_seqdelay_get_shapes() {
        let v = serde_json::to_value(TaskView::from(info(State::Active))).unwrap();
        assert_eq!(v["state"], json!(2));
        assert_eq!(v["state_name"], json!("active"));
        assert_eq!(v["created_at"], json!("2027-01-15T08:00:00Z"));
        assert_eq!(v["active_at"], json!("2027-01-15T08:01:10Z"));
        assert_eq!(v["created_at_ms"], json!(1_800_000_000_000u64));
        assert_eq!(v["id"], json!("a"));
        let never = TaskInfo {
            history: Vec::new(),
            ..info(State::Delayed)
        };
        let v = serde_json::to_value(TaskView::from(never)).unwrap();
        assert_eq!(v["active_at"], json!(ZERO_TIME));
    }

    #[test]
    fn list_item_writes_seqdelay_list_shapes() {
        let v = serde_json::to_value(TaskListItem::from(info(State::Ready))).unwrap();
        assert_eq!(v["state"], json!("ready"));
        assert_eq!(v["state_code"], json!(1));
        assert_eq!(v["state_name"], json!("ready"));
        assert_eq!(v["created_at"], json!(1_800_000_000_000u64));
        assert_eq!(
            v["active_at"],
            json!(1_800_000_061_000u64),
            "the last attempt's start"
        );
        assert_eq!(v["delay_ms"], json!(60_000));
    }

    #[test]
    fn views_read_back_what_they_wrote() {
        let view = TaskView::from(info(State::Dead));
        let text = serde_json::to_string(&view).unwrap();
        assert_eq!(serde_json::from_str::<TaskView>(&text).unwrap(), view);
        let item = TaskListItem::from(info(State::Cancelled));
        let text = serde_json::to_string(&item).unwrap();
        let back: TaskListItem = serde_json::from_str(&text).unwrap();
        assert_eq!(back, item);
        assert_eq!(back.retries, 1, "fields read through the view");
    }

    #[test]
    fn views_name_the_body_encoding_always() {
        let v = serde_json::to_value(TaskView::from(info(State::Ready))).unwrap();
        assert_eq!(
            (&v["body"], &v["body_encoding"]),
            (&json!("x"), &json!("text"))
        );
        let binary = TaskInfo {
            body: vec![0xff, 0x00, 0x80],
            ..info(State::Ready)
        };
        let view = TaskView::from(binary.clone());
        let v = serde_json::to_value(&view).unwrap();
        assert_eq!(
            (&v["body"], &v["body_encoding"]),
            (&json!("/wCA"), &json!("base64"))
        );
        assert_eq!(view.body_bytes().unwrap(), binary.body);
        let item = serde_json::to_value(TaskListItem::from(binary)).unwrap();
        assert_eq!(item["body_encoding"], json!("base64"));
        // An answer without the field (an older server) reads as text.
        let mut older = serde_json::to_value(TaskView::from(info(State::Ready))).unwrap();
        older.as_object_mut().unwrap().remove("body_encoding");
        let back: TaskView = serde_json::from_value(older).unwrap();
        assert_eq!(back.body_bytes().unwrap(), b"x");
    }

    #[test]
    fn rfc3339_of_edges() {
        assert_eq!(rfc3339(None), ZERO_TIME);
        assert_eq!(rfc3339(Some(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(Some(1_500)), "1970-01-01T00:00:01.5Z");
        assert_eq!(rfc3339(Some(u64::MAX)), ZERO_TIME);
    }
}
