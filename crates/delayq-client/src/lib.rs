//! A typed async client of the delayq HTTP API (docs/design.md §3).
//!
//! ```no_run
//! # async fn demo() -> Result<(), delayq_client::ClientError> {
//! use delayq_client::{Client, NewTask, PopOptions};
//!
//! let client = Client::new("http://127.0.0.1:9280", None)?;
//! client
//!     .add(&NewTask::new("order-auto-cancel", "cancel-123").delay_ms(15 * 60_000))
//!     .await?;
//! for task in client.pop("order-auto-cancel", PopOptions::default().timeout_ms(30_000)).await? {
//!     client.finish(&task.topic, &task.id, Some(&task.receipt)).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! The client speaks the seqdelay-compatible envelope `{"code", "message", "data"}` and
//! returns `data` as the wire types of [`delayq_api`], the very types the server encodes
//! (re-exported here), so a field the API gains reaches the client's callers unchanged. Its one error type,
//! [`ClientError`], tells transport failures (retryable) from API refusals; see [`error`].
//!
//! - [`client`]: the [`Client`] and the options of its calls.
//! - [`error`]: [`ClientError`] and [`ErrorKind`].

pub mod client;
pub mod error;
mod wire;

pub use client::{Ack, Call, Client, ClientOptions, ListOptions, PopOptions};
pub use delayq_api::flow::LimitsView;
pub use delayq_api::push::{PushFigures, PushTarget, TargetView};
pub use delayq_api::{
    BodyEncoding, PauseData, ReleaseData, StatsView, TaskDelivery, TaskListItem, TaskPage,
    TaskView, decode_body, encode_body,
};
pub use delayq_api::{
    BodyText, PutScheduleData, ScheduleList, ScheduleRequest, ScheduleView, WholeMillis,
};
pub use delayq_core::schedule::Missed;
pub use delayq_core::{
    AddOutcome, Backoff, Expiry, FlowLimits, MaxRetries, Millis, NewTask, OnDuplicate, OnExpire,
    State, When,
};
pub use delayq_core::{BuryOptions, ReleaseOptions, TraceContext};
pub use error::{ClientError, ErrorKind};
pub use reqwest::Url;

/// The result of one task of a batch add.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchItem {
    /// The task's position in the batch, from 0.
    pub index: usize,
    /// The task's id, when the server names it.
    pub id: Option<String>,
    /// What happened to the task.
    pub result: Result<AddOutcome, BatchItemError>,
}

/// Why one task of a batch was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchItemError {
    /// The status-like code the server gave (400 invalid, 409 duplicate, ...).
    pub code: i64,
    /// The server's message, naming the field or the conflict.
    pub message: String,
}
