//! The task model: states, the options a producer sets, and the views a consumer sees.
//!
//! These types are shared by every backend and by the HTTP layer, so they serialize to the
//! seqdelay-compatible JSON field names of docs/design.md §3.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;
use crate::trace::TraceContext;

/// Epoch milliseconds: every instant in delayq is one of these (docs/design.md §2 rule 12).
pub type Millis = u64;

/// A task's priority: lower numbers are handed out first (docs/design.md §1, §2 rule 11).
pub type Priority = u32;

/// The priority of a task whose producer gave none: beanstalkd's convention, below which a
/// task counts as "urgent".
pub const DEFAULT_PRIORITY: Priority = 1024;

/// The state of a task (docs/design.md §2). The numeric codes are seqdelay's and appear in the JSON API.
///
/// Deliberately exhaustive: the six states are the contract, and every backend must handle
/// each of them explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Waiting for its due time.
    Delayed = 0,
    /// Due, waiting for a consumer.
    Ready = 1,
    /// Handed to a consumer that has not yet confirmed it.
    Active = 2,
    /// Confirmed by its consumer; kept for the retention period.
    Finished = 3,
    /// Cancelled by a producer; kept for the retention period.
    Cancelled = 4,
    /// Out of retries; kept until requeued or deleted.
    Dead = 5,
}

impl State {
    /// Every state, in code order.
    pub const ALL: [State; 6] = [
        State::Delayed,
        State::Ready,
        State::Active,
        State::Finished,
        State::Cancelled,
        State::Dead,
    ];

    /// The seqdelay-compatible numeric code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The state with this numeric code, if any.
    pub fn from_code(code: u8) -> Option<State> {
        State::ALL.get(usize::from(code)).copied()
    }

    /// The lower-case name used as `state_name` in the JSON API.
    pub fn name(self) -> &'static str {
        match self {
            State::Delayed => "delayed",
            State::Ready => "ready",
            State::Active => "active",
            State::Finished => "finished",
            State::Cancelled => "cancelled",
            State::Dead => "dead",
        }
    }

    /// Parses a state given by name (`ready`) or by code (`1`).
    pub fn parse(text: &str) -> Option<State> {
        if let Ok(code) = text.parse::<u8>() {
            return State::from_code(code);
        }
        State::ALL
            .into_iter()
            .find(|s| s.name().eq_ignore_ascii_case(text))
    }

    /// Whether the task has ended (finished or cancelled) and only waits for its retention to pass.
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Finished | State::Cancelled)
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What `add` does when a task with the same (topic, id) already exists (docs/design.md §2 rule 9).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnDuplicate {
    /// Refuse the add with a conflict (the default).
    #[default]
    Reject,
    /// Replace body, due and options; the old schedule is gone.
    Replace,
    /// Change nothing and report that the task existed.
    Keep,
}

/// How many redeliveries a task may have (docs/design.md §2 rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub enum MaxRetries {
    /// At most this many redeliveries; `Limited(0)` means one attempt only.
    Limited(u32),
    /// Redeliver for ever (`-1` in the API).
    Unlimited,
}

impl MaxRetries {
    /// The API's integer form: the count, or `-1` for no limit.
    pub fn as_i64(self) -> i64 {
        match self {
            MaxRetries::Limited(n) => i64::from(n),
            MaxRetries::Unlimited => -1,
        }
    }

    /// Whether a task that has been redelivered `retries` times may be redelivered once more.
    pub fn allows(self, retries: u32) -> bool {
        match self {
            MaxRetries::Limited(max) => retries < max,
            MaxRetries::Unlimited => true,
        }
    }
}

impl TryFrom<i64> for MaxRetries {
    type Error = String;

    fn try_from(value: i64) -> Result<Self, Self::Error> {
        match value {
            -1 => Ok(MaxRetries::Unlimited),
            0.. => u32::try_from(value)
                .map(MaxRetries::Limited)
                .map_err(|_| format!("must be at most {}", u32::MAX)),
            _ => Err("must be -1 (no limit) or a count >= 0".to_owned()),
        }
    }
}

impl From<MaxRetries> for i64 {
    fn from(value: MaxRetries) -> i64 {
        value.as_i64()
    }
}

/// When a new task becomes due: relative to its arrival, or at an absolute instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// `delay_ms` after the moment the queue receives the task.
    Delay(u64),
    /// At this epoch millisecond.
    At(Millis),
}

impl Default for When {
    fn default() -> Self {
        When::Delay(0)
    }
}

/// When a new task expires if it has not been handed out by then (docs/design.md §11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// `expires_in_ms` after the moment the queue receives the task (like `delay_ms`).
    In(u64),
    /// At this epoch millisecond.
    At(Millis),
}

/// What happens to a task whose expiry passes before it is handed out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnExpire {
    /// The task goes DEAD with the last error `expired` (the default): an operator can see
    /// it and requeue it.
    #[default]
    Dead,
    /// The task is deleted.
    Drop,
}

impl OnExpire {
    /// The API's word for the policy.
    pub fn name(self) -> &'static str {
        match self {
            OnExpire::Dead => "dead",
            OnExpire::Drop => "drop",
        }
    }
}

/// The last error (and the outcome in the history) of a task that expired into DEAD.
pub const EXPIRED: &str = "expired";

/// A task as a producer submits it, before validation.
///
/// Optional fields left `None` take the queue's defaults.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct NewTask {
    /// The queue the task belongs to.
    pub topic: String,
    /// The caller's id, unique inside the topic.
    pub id: String,
    /// Opaque payload: any bytes.
    pub body: Vec<u8>,
    /// Lower first; `None` takes [`DEFAULT_PRIORITY`].
    pub priority: Option<Priority>,
    /// When the task becomes due.
    pub when: When,
    /// Time to run: how long a consumer may hold the task.
    pub ttr_ms: Option<u64>,
    /// How many redeliveries are allowed.
    pub max_retries: Option<MaxRetries>,
    /// The wait before each redelivery after a failure.
    pub backoff: Option<Backoff>,
    /// What to do if the (topic, id) exists already.
    pub on_duplicate: OnDuplicate,
    /// The producer's trace context, stored with the task and handed to its consumers.
    pub trace: Option<TraceContext>,
    /// When the task expires unless handed out before; `None`: never.
    pub expiry: Option<Expiry>,
    /// What an expiry does (DEAD by default).
    pub on_expire: OnExpire,
    /// The flow-control key (a merchant, a user): a topic's `max_active_per_key` bounds the
    /// ACTIVE tasks of one key (docs/design.md §11).
    pub key: Option<String>,
}

impl NewTask {
    /// A task due `delay_ms` from now, with an empty body and default options.
    pub fn new(topic: impl Into<String>, id: impl Into<String>) -> Self {
        NewTask {
            topic: topic.into(),
            id: id.into(),
            ..NewTask::default()
        }
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets the priority (lower first).
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Makes the task due `delay_ms` after it arrives.
    pub fn delay_ms(mut self, delay_ms: u64) -> Self {
        self.when = When::Delay(delay_ms);
        self
    }

    /// Makes the task due at the epoch millisecond `at_ms`.
    pub fn run_at_ms(mut self, at_ms: Millis) -> Self {
        self.when = When::At(at_ms);
        self
    }

    /// Sets the time to run.
    pub fn ttr_ms(mut self, ttr_ms: u64) -> Self {
        self.ttr_ms = Some(ttr_ms);
        self
    }

    /// Sets the number of redeliveries allowed.
    pub fn max_retries(mut self, max: MaxRetries) -> Self {
        self.max_retries = Some(max);
        self
    }

    /// Sets the retry schedule.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = Some(backoff);
        self
    }

    /// Sets the duplicate policy.
    pub fn on_duplicate(mut self, policy: OnDuplicate) -> Self {
        self.on_duplicate = policy;
        self
    }

    /// Sets the trace context the task continues.
    pub fn trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Makes the task expire `expires_in_ms` after it arrives unless handed out before.
    pub fn expires_in_ms(mut self, expires_in_ms: u64) -> Self {
        self.expiry = Some(Expiry::In(expires_in_ms));
        self
    }

    /// Makes the task expire at the epoch millisecond `at_ms` unless handed out before.
    pub fn expires_at_ms(mut self, at_ms: Millis) -> Self {
        self.expiry = Some(Expiry::At(at_ms));
        self
    }

    /// Sets what an expiry does.
    pub fn on_expire(mut self, policy: OnExpire) -> Self {
        self.on_expire = policy;
        self
    }

    /// Sets the flow-control key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// How a consumer gives a task back after a failed attempt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseOptions {
    /// The receipt of the attempt being released; a stale one is a conflict.
    pub receipt: Option<String>,
    /// Wait this long before redelivery instead of the task's backoff.
    pub delay_ms: Option<u64>,
    /// What went wrong, kept as the task's last error.
    pub error: Option<String>,
    /// A new priority for the task (beanstalkd's `release <id> <pri> <delay>`).
    pub priority: Option<Priority>,
}

impl ReleaseOptions {
    /// Release with this receipt.
    pub fn receipt(mut self, receipt: impl Into<String>) -> Self {
        self.receipt = Some(receipt.into());
        self
    }

    /// Redeliver after `delay_ms` regardless of the backoff.
    pub fn delay_ms(mut self, delay_ms: u64) -> Self {
        self.delay_ms = Some(delay_ms);
        self
    }

    /// Record this error text.
    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    /// Give the task this priority from now on.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }
}

/// How a consumer buries the task it holds (ACTIVE → DEAD with the reason "buried",
/// docs/design.md §2 rule 13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BuryOptions {
    /// The receipt of the attempt being buried; a stale one is a conflict.
    pub receipt: Option<String>,
    /// Why, kept as the task's last error (default "buried").
    pub error: Option<String>,
    /// A new priority for the task (beanstalkd's `bury <id> <pri>`).
    pub priority: Option<Priority>,
}

impl BuryOptions {
    /// Bury with this receipt.
    pub fn receipt(mut self, receipt: impl Into<String>) -> Self {
        self.receipt = Some(receipt.into());
        self
    }

    /// Record this reason instead of "buried".
    pub fn error(mut self, error: impl Into<String>) -> Self {
        self.error = Some(error.into());
        self
    }

    /// Give the task this priority from now on.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }
}

/// Whether a topic hands out its ready tasks (docs/design.md §2 rule 14).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Whether the topic is paused now.
    pub paused: bool,
    /// When the pause ends by itself; `None` while paused means until resumed.
    pub until_ms: Option<Millis>,
}

impl Pause {
    /// The pause as it stands at `now`: a pause whose end has passed is over.
    pub fn at(self, now: Millis) -> Pause {
        match self.until_ms {
            Some(until) if self.paused && until <= now => Pause::default(),
            _ => self,
        }
    }

    /// Whether the topic hands nothing out at `now`.
    pub fn holds(self, now: Millis) -> bool {
        self.at(now).paused
    }
}
/// What `add` did with one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum AddOutcome {
    /// The task is new.
    Added,
    /// An existing task was replaced (`on_duplicate: replace`).
    Replaced,
    /// The task existed and was left as it was (`on_duplicate: keep`).
    Existed,
}

/// One delivery of a task to a consumer (what `pop` returns).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivery {
    /// The task's id.
    pub id: String,
    /// The task's topic.
    pub topic: String,
    /// The payload.
    pub body: Vec<u8>,
    /// The task's priority.
    pub priority: Priority,
    /// How many times the task was redelivered before this attempt.
    pub retries: u32,
    /// The token of this attempt; finish, release and touch may pass it.
    pub receipt: String,
    /// When the task became due.
    pub due_ms: Millis,
    /// How long this consumer may hold the task.
    pub ttr_ms: u64,
    /// The trace context the task was added with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// The task's flow-control key, if it has one (docs/flow-control.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl Delivery {
    /// The body as text, when it is UTF-8.
    pub fn body_text(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }
}

/// One past attempt of a task, kept for its history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    /// When the attempt started.
    #[cfg_attr(feature = "openapi", schema(value_type = u64))]
    pub started_at_ms: Millis,
    /// When it ended (finish, release or ttr expiry).
    #[cfg_attr(feature = "openapi", schema(value_type = u64))]
    pub ended_at_ms: Millis,
    /// How it ended: `released`, `ttr_expired`.
    pub outcome: String,
    /// The error the consumer reported, if any.
    pub error: Option<String>,
}

/// How many failed attempts a task's history keeps: past it the oldest is dropped (on every
/// backend; the Redis scripts' `HISTORY`).
pub const HISTORY_LEN: usize = 16;

impl Attempt {
    /// Remembers this failed attempt in `history`, dropping the oldest past [`HISTORY_LEN`],
    /// and its error, if it names one, as the task's `last_error`.
    pub fn remember(self, history: &mut VecDeque<Attempt>, last_error: &mut Option<String>) {
        if history.len() == HISTORY_LEN {
            history.pop_front();
        }
        if self.error.is_some() {
            last_error.clone_from(&self.error);
        }
        history.push_back(self);
    }
}

/// The full view of a task, as `get` and `list` return it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskInfo {
    /// The task's id.
    pub id: String,
    /// The task's topic.
    pub topic: String,
    /// The payload.
    pub body: Vec<u8>,
    /// The task's priority.
    pub priority: Priority,
    /// The state.
    pub state: State,
    /// When the task is (or was) due.
    pub due_ms: Millis,
    /// The delay it was added with (`due - created`), for seqdelay compatibility.
    pub delay_ms: u64,
    /// Time to run.
    pub ttr_ms: u64,
    /// Redeliveries allowed (`-1`: no limit).
    pub max_retries: i64,
    /// Redeliveries so far.
    pub retries: u32,
    /// When the task was added.
    pub created_at_ms: Millis,
    /// When the task last changed state.
    pub updated_at_ms: Millis,
    /// The retry schedule, if any.
    pub backoff: Option<Backoff>,
    /// While ACTIVE: the ttr deadline; while FINISHED/CANCELLED: when the record is removed.
    pub deadline_ms: Option<Millis>,
    /// The last error a consumer reported.
    pub last_error: Option<String>,
    /// The failed attempts, oldest first (bounded).
    pub history: Vec<Attempt>,
    /// The trace context the task was added with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// When the task expires unless handed out before, if it has an expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<Millis>,
    /// What its expiry does (meaningful only with `expires_at_ms`).
    #[serde(default)]
    pub on_expire: OnExpire,
    /// The flow-control key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl TaskInfo {
    /// The body as text, when it is UTF-8.
    pub fn body_text(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }
}

/// Counters of one topic (docs/design.md §3 `/stats`). Maintained on every change, never computed by a scan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicStats {
    /// Tasks waiting for their due time.
    pub delayed: u64,
    /// Tasks waiting for a consumer.
    pub ready: u64,
    /// Tasks held by consumers.
    pub active: u64,
    /// Tasks out of retries.
    pub dead: u64,
    /// Finished tasks still retained.
    pub finished: u64,
    /// Cancelled tasks still retained.
    pub cancelled: u64,
    /// All records of the topic.
    pub total: u64,
    /// The earliest due time among delayed tasks.
    pub next_due_ms: Option<Millis>,
    /// Whether the topic is paused, and until when.
    pub pause: Pause,
    /// Tasks that expired before being handed out (DEAD or dropped), cumulative: in Redis
    /// mode since the topic's keys were created, in memory and embedded mode since the
    /// process started.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expired: u64,
    /// READY tasks a pop could not take now because of the topic's limits (docs/design.md
    /// §11), by the limit that holds them.
    #[serde(default, skip_serializing_if = "HeldBack::is_none")]
    pub held_back: HeldBack,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// READY tasks held back by a topic's limits, by limit. A task counts under the first limit
/// that holds it, in this order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HeldBack {
    /// The topic has `max_active` tasks ACTIVE: every READY task waits.
    pub max_active: u64,
    /// The rate allows no hand-out now: every READY task waits.
    pub rate: u64,
    /// READY tasks that `max_active_per_key` keeps from going now: of each key, those past
    /// the limit less the key's ACTIVE tasks (so every READY task of a full key).
    pub key: u64,
}

impl HeldBack {
    /// Whether nothing is held back.
    pub fn is_none(&self) -> bool {
        *self == HeldBack::default()
    }

    /// All held back tasks.
    pub fn total(&self) -> u64 {
        self.max_active + self.rate + self.key
    }

    /// The counts by reason, as `/metrics` labels them.
    pub fn by_reason(&self) -> [(&'static str, u64); 3] {
        [
            ("max_active", self.max_active),
            ("rate", self.rate),
            ("key", self.key),
        ]
    }
}

impl TopicStats {
    /// The counter of one state.
    pub fn count(&self, state: State) -> u64 {
        match state {
            State::Delayed => self.delayed,
            State::Ready => self.ready,
            State::Active => self.active,
            State::Finished => self.finished,
            State::Cancelled => self.cancelled,
            State::Dead => self.dead,
        }
    }

    /// Adds `delta` (±1) to the counter of `state` and to the total.
    pub fn adjust(&mut self, state: State, delta: i64) {
        let slot = match state {
            State::Delayed => &mut self.delayed,
            State::Ready => &mut self.ready,
            State::Active => &mut self.active,
            State::Finished => &mut self.finished,
            State::Cancelled => &mut self.cancelled,
            State::Dead => &mut self.dead,
        };
        *slot = slot.saturating_add_signed(delta);
        self.total = self.total.saturating_add_signed(delta);
    }

    /// Adds another topic's (or partition's) counters to these.
    pub fn merge(&mut self, other: &TopicStats) {
        self.delayed += other.delayed;
        self.ready += other.ready;
        self.active += other.active;
        self.dead += other.dead;
        self.finished += other.finished;
        self.cancelled += other.cancelled;
        self.total += other.total;
        self.expired += other.expired;
        self.held_back.max_active += other.held_back.max_active;
        self.held_back.rate += other.held_back.rate;
        self.held_back.key += other.held_back.key;
        self.next_due_ms = match (self.next_due_ms, other.next_due_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // Partitions of one topic share its pause; should they ever disagree, the pause wins.
        if other.pause.paused && !self.pause.paused {
            self.pause = other.pause;
        }
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items of this page.
    pub items: Vec<T>,
    /// How many items match in all.
    pub total: u64,
    /// The page number, from 1.
    pub page: u64,
    /// The page size asked for.
    pub page_size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(n: u64, error: Option<&str>) -> Attempt {
        Attempt {
            started_at_ms: n,
            ended_at_ms: n + 1,
            outcome: "released".to_owned(),
            error: error.map(str::to_owned),
        }
    }

    #[test]
    fn remember_keeps_the_newest_attempts_and_the_last_named_error() {
        // (attempts remembered, the error of each: Some for even n, what history and
        // last_error hold after)
        let table: [(u64, usize, u64, Option<&str>); 4] = [
            (1, 1, 0, Some("e0")),
            (2, 2, 0, Some("e0")),
            (16, 16, 0, Some("e14")),
            (17, 16, 1, Some("e16")),
        ];
        for (n, len, first, last_error) in table {
            let mut history = VecDeque::new();
            let mut last = None;
            for i in 0..n {
                let error = (i % 2 == 0).then(|| format!("e{i}"));
                attempt(i, error.as_deref()).remember(&mut history, &mut last);
            }
            assert_eq!(history.len(), len, "{n} attempts");
            assert_eq!(history.front().map(|a| a.started_at_ms), Some(first));
            assert_eq!(history.back().map(|a| a.started_at_ms), Some(n - 1));
            assert_eq!(last.as_deref(), last_error, "{n} attempts");
        }
        // An attempt without an error keeps the last named one.
        let mut history = VecDeque::new();
        let mut last = Some("earlier".to_owned());
        attempt(0, None).remember(&mut history, &mut last);
        assert_eq!(last.as_deref(), Some("earlier"));
    }

    #[test]
    fn state_codes_and_names_round_trip() {
        let table = [
            (State::Delayed, 0, "delayed"),
            (State::Ready, 1, "ready"),
            (State::Active, 2, "active"),
            (State::Finished, 3, "finished"),
            (State::Cancelled, 4, "cancelled"),
            (State::Dead, 5, "dead"),
        ];
        for (state, code, name) in table {
            assert_eq!(state.code(), code);
            assert_eq!(state.name(), name);
            assert_eq!(State::from_code(code), Some(state));
            assert_eq!(State::parse(name), Some(state));
            assert_eq!(State::parse(&code.to_string()), Some(state));
        }
        assert_eq!(State::from_code(6), None);
        assert_eq!(State::parse("bogus"), None);
    }

    #[test]
    fn max_retries_from_api_integer() {
        let table: [(i64, Result<MaxRetries, ()>); 5] = [
            (-1, Ok(MaxRetries::Unlimited)),
            (0, Ok(MaxRetries::Limited(0))),
            (3, Ok(MaxRetries::Limited(3))),
            (-2, Err(())),
            (i64::from(u32::MAX) + 1, Err(())),
        ];
        for (input, expected) in table {
            assert_eq!(
                MaxRetries::try_from(input).map_err(|_| ()),
                expected,
                "{input}"
            );
        }
    }

    #[test]
    fn max_retries_counts_redeliveries() {
        // max_retries = 3: the 1st, 2nd and 3rd redelivery are allowed, the 4th is not.
        let table = [(0, true), (1, true), (2, true), (3, false), (4, false)];
        for (retries, allowed) in table {
            assert_eq!(MaxRetries::Limited(3).allows(retries), allowed, "{retries}");
        }
        assert!(!MaxRetries::Limited(0).allows(0));
        assert!(MaxRetries::Unlimited.allows(u32::MAX - 1));
    }

    #[test]
    fn pause_ends_by_itself() {
        let forever = Pause {
            paused: true,
            until_ms: None,
        };
        let until_10 = Pause {
            paused: true,
            until_ms: Some(10),
        };
        // (pause, now, holds)
        let table = [
            (Pause::default(), 0, false),
            (forever, u64::MAX, true),
            (until_10, 9, true),
            (until_10, 10, false),
            (until_10, 11, false),
        ];
        for (pause, now, holds) in table {
            assert_eq!(pause.holds(now), holds, "{pause:?} at {now}");
        }
        assert_eq!(until_10.at(10), Pause::default());
    }

    #[test]
    fn stats_adjust_and_merge() {
        let mut a = TopicStats::default();
        a.adjust(State::Delayed, 1);
        a.adjust(State::Delayed, 1);
        a.adjust(State::Delayed, -1);
        a.adjust(State::Ready, 1);
        a.next_due_ms = Some(50);
        let mut b = TopicStats::default();
        b.adjust(State::Dead, 1);
        b.next_due_ms = Some(20);
        a.merge(&b);
        assert_eq!((a.delayed, a.ready, a.dead, a.total), (1, 1, 1, 3));
        assert_eq!(a.next_due_ms, Some(20));
    }
}
