//! The HTTP/JSON contract of delayq, written once.
//!
//! Every shape that crosses the wire lives here: the request bodies and query strings, the
//! `data` of every answer, the envelope around it, how a state is written (a code or a name),
//! the names of add outcomes, and the default limits of the API. The server encodes these
//! types, the client decodes the same types (each derives both `Serialize` and
//! `Deserialize`), the CLI prints them, and the OpenAPI document is generated from their
//! `ToSchema` derives. A field added here appears in all of them; see `docs/http-api.md`.
//!
//! The API keeps seqdelay's endpoints, field names and envelope so that seqdelay's clients
//! work unchanged (`docs/seqdelay.md`), and adds delayq's fields beside them. Where seqdelay
//! writes one thing two ways, both ways are kept: a task's `state` is a code in `GET /get`
//! ([`TaskView`]) and a name in `GET /tasks` ([`TaskListItem`]).
//!
//! - [`endpoint`]: the endpoints, one entry each (method, path, request and response types,
//!   OpenAPI answers); the router, the OpenAPI paths and the client's generic call follow.
//! - [`envelope`]: `{"code", "message", "data"}` and the `data` of an error.
//! - [`request`]: what clients send, and how a request becomes a library call.
//! - [`task`]: the views of a task (`/get`, `/tasks`, `/pop`) and their conversion from the
//!   library's types.
//! - [`response`]: the other answers (add results, stats, topics, ...).
//! - [`schedule`]: recurring schedules (`/schedules`), also the TOML `[[schedules]]` shape.
//! - [`state`]: state codes and names on the wire.
//! - [`limits`]: the API's defaults and maxima.
//! - [`number`]: strict readers of numbers and bodies.
//! - [`body`]: bodies as bytes, written as text or base64.
//! - [`push`]: push targets and their figures (docs/design.md §8).
//! - [`flow`]: a topic's flow limits (docs/design.md §11).

pub mod body;
pub mod endpoint;
pub mod envelope;
pub mod flow;
pub mod limits;
pub mod number;
pub mod push;
pub mod request;
pub mod response;
pub mod schedule;
pub mod state;
pub mod task;
pub mod trace;

pub use body::{BodyEncoding, decode_body, encode_body};
pub use delayq_core::{AddOutcome, Attempt, Backoff, MaxRetries, Millis, OnDuplicate, State};
pub use envelope::{Envelope, ErrorData};
pub use limits::{DEFAULT_PAGE_SIZE, DEFAULT_POP_TIMEOUT_MS, MAX_PAGE_SIZE};
pub use number::{BodyText, Count, WholeMillis};
pub use request::{
    AckRequest, AddBatchRequest, AddRequest, AddTaskRequest, BuryRequest, FinishBatchRequest,
    FinishRequest, GetQuery, PauseRequest, PopRequest, ReleaseRequest, RequeueRequest,
    RescheduleRequest, StatsQuery, TaskKey, TasksQuery, TopicRequest, batch_field,
};
pub use response::{
    AddData, AddResponse, AllStats, BatchItem, FinishBatchData, FinishItem, Health, NoData,
    PauseData, PopData, ReleaseData, RequeueData, StatsData, StatsView, TopicEntry, TopicList,
    TopicStatsData, TouchData,
};
pub use schedule::{
    PutScheduleData, ScheduleKey, ScheduleList, ScheduleQuery, ScheduleRequest, ScheduleView,
    SchedulesQuery,
};
pub use task::{TaskDelivery, TaskFields, TaskListItem, TaskPage, TaskView};
