//! A history of client operations and a checker of delayq's promises over it.
//!
//! A test records every operation its clients make, whatever the front door (library, HTTP,
//! beanstalk): when the client invoked it and when the answer came back (client wall time in
//! microseconds), its arguments, and its outcome: a success with the answer, a definite error
//! (nothing happened), or "outcome unknown" (a timeout, a dropped connection, a 5xx with
//! `data.outcome: "unknown"`: it may or may not have happened). [`History::check`] then looks
//! for the violations of DESIGN §2 that a client can see:
//!
//! - [`Invariant::AckedAddLost`]: a `get` invoked after an acknowledged add answered "missing",
//!   and no delete, nor a finish or cancel older than the retention, explains it (rule 3);
//! - [`Invariant::Early`]: a pop answered before the task's `due_ms`, before the add's
//!   invocation plus its `delay_ms`, or before a release's invocation plus its `delay_ms`
//!   (rule 1);
//! - [`Invariant::SecondHolder`]: two deliveries of one task whose ttr windows overlap,
//!   while the first holder neither finished nor released it first and no operation on the
//!   task in between had an unknown outcome (rules 4 and 8);
//! - [`Invariant::DeliveredAfterFinal`]: a delivery whose pop was invoked after an
//!   acknowledged cancel or finish of the task had completed (rule 7);
//! - [`Invariant::NotSettled`] (only with [`CheckOptions::require_settled`]): the last `get`
//!   of an acknowledged add shows it still delayed, ready or active.
//!
//! **Only what is certain is a violation.** The server acts at some instant between a
//! request's invocation and its completion, and the client cannot tell when; so every check
//! takes the reading most favourable to the server (a delivery happened as late as its pop's
//! completion, a ttr window started as early as its pop's invocation). Server and client read
//! the same wall clock (one machine), which the server floors to milliseconds; the checker
//! floors invocation times the same way. Operations still in flight count as unknown with no
//! completion yet. Reading the clock is the only thing the recorder does besides memory: no
//! IO, so the checker is pure and its unit tests build histories by hand.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch, as read by the client.
pub type Micros = u64;

/// The completion time of an operation still in flight: any time from now on.
pub const IN_FLIGHT: Micros = Micros::MAX;

/// The current wall time in microseconds since the epoch.
pub fn now_us() -> Micros {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_micros()).unwrap_or(Micros::MAX - 1)
}

/// A task's identity: its topic and id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskKey {
    /// The topic.
    pub topic: String,
    /// The id inside the topic.
    pub id: String,
}

impl TaskKey {
    /// The key of (`topic`, `id`).
    pub fn new(topic: impl Into<String>, id: impl Into<String>) -> Self {
        TaskKey {
            topic: topic.into(),
            id: id.into(),
        }
    }
}

impl fmt::Display for TaskKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.id)
    }
}

/// An operation and its arguments, as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Add a task, due after `delay_ms` or at `due_ms` (epoch ms).
    Add {
        /// The task.
        key: TaskKey,
        /// The delay asked for, if given as a delay.
        delay_ms: Option<u64>,
        /// The due asked for, if given as an instant.
        due_ms: Option<u64>,
        /// The time to run asked for, if any.
        ttr_ms: Option<u64>,
    },
    /// Pop ready tasks of a topic.
    Pop {
        /// The topic.
        topic: String,
    },
    /// Finish a held task.
    Finish {
        /// The task.
        key: TaskKey,
        /// The receipt of the delivery, if passed.
        receipt: Option<String>,
    },
    /// Release a held task, ready again after `delay_ms` (else its backoff).
    Release {
        /// The task.
        key: TaskKey,
        /// The receipt of the delivery, if passed.
        receipt: Option<String>,
        /// The delay asked for, if any.
        delay_ms: Option<u64>,
    },
    /// Restart a held task's ttr.
    Touch {
        /// The task.
        key: TaskKey,
        /// The receipt of the delivery, if passed.
        receipt: Option<String>,
    },
    /// Cancel a task.
    Cancel {
        /// The task.
        key: TaskKey,
    },
    /// Move a dead task back to ready.
    Requeue {
        /// The task.
        key: TaskKey,
    },
    /// Remove a task's record.
    Delete {
        /// The task.
        key: TaskKey,
    },
    /// Read a task's record.
    Get {
        /// The task.
        key: TaskKey,
    },
}

impl Op {
    /// The task the operation names (none for a pop, which names a topic).
    pub fn key(&self) -> Option<&TaskKey> {
        match self {
            Op::Add { key, .. }
            | Op::Finish { key, .. }
            | Op::Release { key, .. }
            | Op::Touch { key, .. }
            | Op::Cancel { key }
            | Op::Requeue { key }
            | Op::Delete { key }
            | Op::Get { key } => Some(key),
            Op::Pop { .. } => None,
        }
    }

    /// The receipt the operation passes, if any.
    fn receipt(&self) -> Option<&str> {
        match self {
            Op::Finish { receipt, .. }
            | Op::Release { receipt, .. }
            | Op::Touch { receipt, .. } => receipt.as_deref(),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let receipt = |r: &Option<String>| r.as_deref().unwrap_or("-").to_owned();
        match self {
            Op::Add {
                key,
                delay_ms,
                due_ms,
                ttr_ms,
            } => write!(
                f,
                "add {key} delay_ms={delay_ms:?} due_ms={due_ms:?} ttr_ms={ttr_ms:?}"
            ),
            Op::Pop { topic } => write!(f, "pop {topic}"),
            Op::Finish { key, receipt: r } => write!(f, "finish {key} receipt={}", receipt(r)),
            Op::Release {
                key,
                receipt: r,
                delay_ms,
            } => write!(
                f,
                "release {key} receipt={} delay_ms={delay_ms:?}",
                receipt(r)
            ),
            Op::Touch { key, receipt: r } => write!(f, "touch {key} receipt={}", receipt(r)),
            Op::Cancel { key } => write!(f, "cancel {key}"),
            Op::Requeue { key } => write!(f, "requeue {key}"),
            Op::Delete { key } => write!(f, "delete {key}"),
            Op::Get { key } => write!(f, "get {key}"),
        }
    }
}

/// One task handed out by a pop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The task.
    pub key: TaskKey,
    /// Its due as the server reported it (epoch ms).
    pub due_ms: u64,
    /// Its time to run.
    pub ttr_ms: u64,
    /// The receipt of this delivery.
    pub receipt: String,
    /// Its redeliveries so far.
    pub retries: u32,
}

/// A task's state as `get` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Waiting for its due.
    Delayed,
    /// Due, waiting for a consumer.
    Ready,
    /// Held by a consumer.
    Active,
    /// Finished.
    Finished,
    /// Cancelled.
    Cancelled,
    /// Out of retries (or buried).
    Dead,
}

impl TaskState {
    /// The state of a lower-case state name (`delayed`, ..., `dead`).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "delayed" => TaskState::Delayed,
            "ready" => TaskState::Ready,
            "active" => TaskState::Active,
            "finished" => TaskState::Finished,
            "cancelled" => TaskState::Cancelled,
            "dead" => TaskState::Dead,
            _ => return None,
        })
    }

    /// Whether the task is done with (nothing will happen to it by itself).
    pub fn is_settled(self) -> bool {
        match self {
            TaskState::Finished | TaskState::Cancelled | TaskState::Dead => true,
            TaskState::Delayed | TaskState::Ready | TaskState::Active => false,
        }
    }
}

/// What a successful operation answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Done, nothing more to say (finish, release, touch, cancel, requeue, delete).
    Done,
    /// An add: whether the task existed already (so this add did not create it).
    Added {
        /// True when an existing task answered (`on_duplicate: keep`).
        existed: bool,
    },
    /// A pop: the tasks handed out (none when the long-poll ran out).
    Delivered(Vec<Delivery>),
    /// A get that found the task.
    Found {
        /// Its state.
        state: TaskState,
    },
    /// A get that found no record.
    Missing,
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded with this answer.
    Ok(Answer),
    /// It failed and certainly changed nothing (a 4xx, a 5xx without `outcome: unknown`, a
    /// refused connection); the text says which error.
    Failed(String),
    /// It may or may not have taken effect (a timeout, a dropped connection, a 5xx with
    /// `outcome: unknown`, or still in flight); the text says why.
    Unknown(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(Answer::Done) => write!(f, "ok"),
            Outcome::Ok(Answer::Added { existed }) => write!(f, "ok existed={existed}"),
            Outcome::Ok(Answer::Delivered(tasks)) if tasks.is_empty() => write!(f, "ok nothing"),
            Outcome::Ok(Answer::Delivered(tasks)) => {
                write!(f, "ok delivered")?;
                for t in tasks {
                    write!(
                        f,
                        " [{} due_ms={} ttr_ms={} receipt={} retries={}]",
                        t.key, t.due_ms, t.ttr_ms, t.receipt, t.retries
                    )?;
                }
                Ok(())
            }
            Outcome::Ok(Answer::Found { state }) => write!(f, "ok {state:?}"),
            Outcome::Ok(Answer::Missing) => write!(f, "ok missing"),
            Outcome::Failed(kind) => write!(f, "failed: {kind}"),
            Outcome::Unknown(why) => write!(f, "outcome unknown: {why}"),
        }
    }
}

/// One operation of one client, from invocation to completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Which client made it (any number the test chooses).
    pub client: usize,
    /// What was asked.
    pub op: Op,
    /// When the client sent it.
    pub invoked_us: Micros,
    /// When the answer came back ([`IN_FLIGHT`] if it has not).
    pub completed_us: Micros,
    /// How it ended.
    pub outcome: Outcome,
}

impl Event {
    /// Whether it succeeded.
    fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok(_))
    }

    /// Whether it may have taken effect without the client knowing.
    fn is_unknown(&self) -> bool {
        matches!(self.outcome, Outcome::Unknown(_))
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |us: Micros| format!("{}.{:03}", us / 1000, us % 1000);
        let done = if self.completed_us == IN_FLIGHT {
            "in flight".to_owned()
        } else {
            ms(self.completed_us)
        };
        write!(
            f,
            "client {} [{} .. {}] {} -> {}",
            self.client,
            ms(self.invoked_us),
            done,
            self.op,
            self.outcome
        )
    }
}

/// A recorder that clients on many threads write to.
#[derive(Debug, Default)]
pub struct Recorder {
    events: Mutex<Vec<Event>>,
}

/// A handle on an operation invoked and not yet completed.
#[derive(Debug)]
#[must_use = "complete the call with its outcome"]
pub struct Call {
    index: usize,
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Recorder::default()
    }

    /// Records that `client` invokes `op` now.
    pub fn invoke(&self, client: usize, op: Op) -> Call {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        events.push(Event {
            client,
            op,
            invoked_us: now_us(),
            completed_us: IN_FLIGHT,
            outcome: Outcome::Unknown("in flight".into()),
        });
        Call {
            index: events.len() - 1,
        }
    }

    /// Records that `call` completed now with `outcome`.
    pub fn complete(&self, call: Call, outcome: Outcome) {
        let now = now_us();
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let event = &mut events[call.index];
        event.completed_us = now;
        event.outcome = outcome;
    }

    /// Records that `call` completed now with `outcome`, naming the operation as the answer
    /// showed it: a beanstalk `put` learns its task's id (the job id) only from the reply.
    pub fn complete_as(&self, call: Call, op: Op, outcome: Outcome) {
        let now = now_us();
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let event = &mut events[call.index];
        event.op = op;
        event.completed_us = now;
        event.outcome = outcome;
    }

    /// A copy of everything recorded so far (calls in flight stay unknown, in flight).
    pub fn history(&self) -> History {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        History {
            events: events.clone(),
        }
    }

    /// How many operations were recorded.
    pub fn len(&self) -> usize {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A promise of DESIGN §2 that a history can show broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Invariant {
    /// An acknowledged add was not found later (rule 3).
    AckedAddLost,
    /// A task was delivered before it was due (rule 1).
    Early,
    /// A task had a second holder while the first receipt was unexpired (rules 4, 8).
    SecondHolder,
    /// A task was delivered after an acknowledged cancel or finish (rule 7).
    DeliveredAfterFinal,
    /// A task was neither finished, cancelled nor dead at the end.
    NotSettled,
    /// Every add of a task failed with an answer that says nothing happened (a 4xx, a 5xx
    /// without an unknown outcome), yet the task was found or delivered: the answer was false
    /// (the failure's contract, `docs/http-api.md`: a definite failure changed nothing).
    FailedButApplied,
}

/// One broken promise, with the events that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which promise.
    pub invariant: Invariant,
    /// The task concerned.
    pub key: TaskKey,
    /// What the events show.
    pub message: String,
    /// The events that show it, in the order they matter.
    pub events: Vec<Event>,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:?} on {}: {}", self.invariant, self.key, self.message)?;
        for e in &self.events {
            writeln!(f, "    {e}")?;
        }
        Ok(())
    }
}

/// What the checker assumes of the server and asks of the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// How long finished and cancelled records are kept (the server's `--retention-ms`).
    pub retention_ms: u64,
    /// Whether every acknowledged add must be settled (finished, cancelled or dead) at its
    /// last `get`.
    pub require_settled: bool,
    /// How far the server's clock may read behind the client's, in milliseconds. 0 for a
    /// server whose clock is the wall clock floored to the millisecond. An instant the server
    /// computes from its own reading (a due from a delay, a ttr deadline) may then come this
    /// much earlier by the client's clock.
    pub clock_slack_ms: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            retention_ms: 60_000,
            require_settled: false,
            clock_slack_ms: 0,
        }
    }
}

/// A whole history of operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The events in invocation order.
    pub events: Vec<Event>,
}

/// Floors microseconds to the millisecond, as the server's clock reads.
fn floor_ms(us: Micros) -> u64 {
    us / 1000
}

/// The events of one task, by index into the history.
#[derive(Default)]
struct TaskEvents {
    ops: Vec<usize>,
    deliveries: Vec<(usize, usize)>,
}

impl History {
    /// A history of these events (in any order).
    pub fn new(mut events: Vec<Event>) -> Self {
        events.sort_by_key(|e| e.invoked_us);
        History { events }
    }

    /// How many operations of each kind succeeded, failed or ended unknown, for reports.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for e in &self.events {
            match &e.outcome {
                Outcome::Ok(Answer::Delivered(t)) => {
                    c.ok += 1;
                    c.deliveries += t.len();
                }
                Outcome::Ok(_) => c.ok += 1,
                Outcome::Failed(_) => c.failed += 1,
                Outcome::Unknown(_) => c.unknown += 1,
            }
        }
        c.total = self.events.len();
        c
    }

    /// The operations that failed or ended unknown, counted by the operation's name and the
    /// first word of why (an HTTP status, say), for reports: `"add: 503" -> 12`.
    pub fn failures(&self) -> BTreeMap<String, usize> {
        let mut failures = BTreeMap::new();
        for e in &self.events {
            if let Outcome::Failed(why) | Outcome::Unknown(why) = &e.outcome {
                let op = e.op.to_string();
                let op = op.split(' ').next().unwrap_or_default();
                let why = why.split(' ').next().unwrap_or_default();
                *failures.entry(format!("{op}: {why}")).or_default() += 1;
            }
        }
        failures
    }

    /// Every violation the history shows, by task.
    pub fn check(&self, options: &CheckOptions) -> Vec<Violation> {
        let mut tasks: HashMap<&TaskKey, TaskEvents> = HashMap::new();
        for (i, e) in self.events.iter().enumerate() {
            if let Some(key) = e.op.key() {
                tasks.entry(key).or_default().ops.push(i);
            }
            if let Outcome::Ok(Answer::Delivered(ds)) = &e.outcome {
                for (j, d) in ds.iter().enumerate() {
                    tasks.entry(&d.key).or_default().deliveries.push((i, j));
                }
            }
        }
        let mut keys: Vec<&TaskKey> = tasks.keys().copied().collect();
        keys.sort();
        let mut out = Vec::new();
        for key in keys {
            let t = &tasks[key];
            let check = TaskCheck {
                key,
                ops: t.ops.iter().map(|&i| &self.events[i]).collect(),
                deliveries: t
                    .deliveries
                    .iter()
                    .map(|&(i, j)| {
                        let e = &self.events[i];
                        let Outcome::Ok(Answer::Delivered(ds)) = &e.outcome else {
                            unreachable!("indexed as a delivery")
                        };
                        (e, &ds[j])
                    })
                    .collect(),
                options,
            };
            check.run(&mut out);
        }
        out
    }
}

/// Operation counts of a history.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// All operations.
    pub total: usize,
    /// Those that succeeded.
    pub ok: usize,
    /// Those that certainly failed.
    pub failed: usize,
    /// Those whose outcome is unknown.
    pub unknown: usize,
    /// Tasks handed out by pops.
    pub deliveries: usize,
}

/// The checks of one task.
struct TaskCheck<'a> {
    key: &'a TaskKey,
    ops: Vec<&'a Event>,
    deliveries: Vec<(&'a Event, &'a Delivery)>,
    options: &'a CheckOptions,
}

impl TaskCheck<'_> {
    fn run(&self, out: &mut Vec<Violation>) {
        self.acked_adds_found(out);
        self.failed_adds_absent(out);
        self.never_early(out);
        self.one_holder(out);
        self.final_is_final(out);
        if self.options.require_settled {
            self.settled(out);
        }
    }

    fn violation(&self, invariant: Invariant, message: String, events: Vec<&Event>) -> Violation {
        Violation {
            invariant,
            key: self.key.clone(),
            message,
            events: events.into_iter().cloned().collect(),
        }
    }

    /// The acknowledged adds that created the task.
    fn acked_adds(&self) -> impl Iterator<Item = &Event> {
        self.ops.iter().copied().filter(|e| {
            matches!(e.op, Op::Add { .. })
                && matches!(e.outcome, Outcome::Ok(Answer::Added { existed: false }))
        })
    }

    /// (a) Every get invoked after an acknowledged add finds the task, unless a delete, or a
    /// finish or cancel old enough for the retention to have removed it, explains it.
    fn acked_adds_found(&self, out: &mut Vec<Violation>) {
        let retention_us = self.options.retention_ms.saturating_mul(1000);
        for add in self.acked_adds() {
            for get in self.ops.iter().copied().filter(|e| {
                matches!(e.op, Op::Get { .. })
                    && e.outcome == Outcome::Ok(Answer::Missing)
                    && e.invoked_us > add.completed_us
            }) {
                let explained = self.ops.iter().any(|e| {
                    let may_have = e.is_ok() || e.is_unknown();
                    may_have
                        && match e.op {
                            Op::Delete { .. } => e.invoked_us < get.completed_us,
                            Op::Finish { .. } | Op::Cancel { .. } => {
                                e.invoked_us.saturating_add(retention_us) <= get.completed_us
                            }
                            _ => false,
                        }
                });
                if !explained {
                    out.push(
                        self.violation(
                            Invariant::AckedAddLost,
                            "a get after the acknowledged add found no record, and no delete nor \
                         a finish or cancel past the retention explains it"
                                .into(),
                            vec![add, get],
                        ),
                    );
                }
            }
        }
    }

    /// (a') A task whose every add failed for certain (and was added at least once) is
    /// never found nor delivered: a definite failure says nothing happened.
    fn failed_adds_absent(&self, out: &mut Vec<Violation>) {
        let mut adds = self
            .ops
            .iter()
            .copied()
            .filter(|e| matches!(e.op, Op::Add { .. }))
            .peekable();
        let Some(&first) = adds.peek() else {
            return;
        };
        if !adds.all(|e| matches!(e.outcome, Outcome::Failed(_))) {
            return;
        }
        let seen = self
            .ops
            .iter()
            .copied()
            .find(|e| matches!(e.outcome, Outcome::Ok(Answer::Found { .. })))
            .or_else(|| self.deliveries.first().map(|&(pop, _)| pop));
        if let Some(seen) = seen {
            out.push(
                self.violation(
                    Invariant::FailedButApplied,
                    "every add failed with an answer that says nothing happened, yet the task \
                 exists"
                        .into(),
                    vec![first, seen],
                ),
            );
        }
    }

    /// (b) No delivery before its due: not before the reported `due_ms`, the add's invocation
    /// plus its delay (or its `due_ms`), nor an acknowledged release's invocation plus its delay.
    fn never_early(&self, out: &mut Vec<Violation>) {
        for &(pop, d) in &self.deliveries {
            let at = pop.completed_us;
            if at < d.due_ms.saturating_mul(1000) {
                out.push(self.violation(
                    Invariant::Early,
                    format!("delivered before its own due_ms {}", d.due_ms),
                    vec![pop],
                ));
            }
            // The earliest instants the add, and each release acknowledged before the pop,
            // allow.
            let from_adds = self.acked_adds().map(|add| {
                let Op::Add {
                    delay_ms, due_ms, ..
                } = add.op
                else {
                    unreachable!("an add")
                };
                let earliest = match (delay_ms, due_ms) {
                    (_, Some(due)) => due,
                    (Some(delay), None) => floor_ms(add.invoked_us).saturating_add(delay),
                    (None, None) => 0,
                };
                (add, earliest, "the add's")
            });
            // A release that made the task DEAD (out of retries) and a requeue after it make it
            // ready at once: such a release sets no earliest instant.
            let requeued_after = |rel: &Event| {
                self.ops.iter().any(|e| {
                    matches!(e.op, Op::Requeue { .. })
                        && (e.is_ok() || e.is_unknown())
                        && e.completed_us > rel.invoked_us
                        && e.invoked_us < pop.completed_us
                })
            };
            let from_releases = self.ops.iter().copied().filter_map(|rel| match rel.op {
                Op::Release {
                    delay_ms: Some(delay),
                    ..
                } if rel.is_ok() && rel.completed_us < pop.invoked_us && !requeued_after(rel) => {
                    Some((
                        rel,
                        floor_ms(rel.invoked_us).saturating_add(delay),
                        "the release's",
                    ))
                }
                _ => None,
            });
            for (cause, earliest_ms, whose) in from_adds.chain(from_releases) {
                let earliest_ms = earliest_ms.saturating_sub(self.options.clock_slack_ms);
                if at < earliest_ms.saturating_mul(1000) {
                    out.push(self.violation(
                        Invariant::Early,
                        format!(
                            "delivered before {earliest_ms}, {whose} invocation plus its delay"
                        ),
                        vec![cause, pop],
                    ));
                }
            }
        }
    }

    /// (c) No second holder while a receipt is unexpired.
    fn one_holder(&self, out: &mut Vec<Violation>) {
        for (a, &(pop1, d1)) in self.deliveries.iter().enumerate() {
            // The window starts no earlier than pop1's invocation; acknowledged touches with
            // its receipt restart it no earlier than their invocation.
            let mut window_end_ms = floor_ms(pop1.invoked_us).saturating_add(d1.ttr_ms);
            for touch in self.ops.iter().copied().filter(|e| {
                e.is_ok() && matches!(e.op, Op::Touch { .. }) && e.op.receipt() == Some(&d1.receipt)
            }) {
                window_end_ms =
                    window_end_ms.max(floor_ms(touch.invoked_us).saturating_add(d1.ttr_ms));
            }
            let window_end_ms = window_end_ms.saturating_sub(self.options.clock_slack_ms);
            let window_end = window_end_ms.saturating_mul(1000);
            for (b, &(pop2, d2)) in self.deliveries.iter().enumerate() {
                // Each pair once, the later delivery (by completion) second.
                if d2.receipt == d1.receipt || (pop2.completed_us, b) <= (pop1.completed_us, a) {
                    continue;
                }
                if pop2.completed_us >= window_end {
                    continue;
                }
                // Given back by its holder before the second delivery could have happened?
                let given_back = self.ops.iter().any(|e| {
                    e.is_ok()
                        && matches!(e.op, Op::Finish { .. } | Op::Release { .. })
                        && e.op.receipt().is_none_or(|r| r == d1.receipt)
                        && e.invoked_us < pop2.completed_us
                });
                // Anything on the task in between whose outcome is unknown may explain it.
                let unknown_between = self.ops.iter().any(|e| {
                    e.is_unknown()
                        && !matches!(e.op, Op::Get { .. } | Op::Add { .. })
                        && e.invoked_us < pop2.completed_us
                        && e.completed_us > pop1.invoked_us
                });
                if !given_back && !unknown_between {
                    out.push(self.violation(
                        Invariant::SecondHolder,
                        format!(
                            "delivered again while the first receipt {} was unexpired (until {})",
                            d1.receipt, window_end_ms
                        ),
                        vec![pop1, pop2],
                    ));
                }
            }
        }
    }

    /// (d) Nothing delivered by a pop invoked after an acknowledged cancel or finish.
    fn final_is_final(&self, out: &mut Vec<Violation>) {
        for fin in self
            .ops
            .iter()
            .copied()
            .filter(|e| e.is_ok() && matches!(e.op, Op::Finish { .. } | Op::Cancel { .. }))
        {
            for &(pop, _) in &self.deliveries {
                if pop.invoked_us > fin.completed_us {
                    out.push(self.violation(
                        Invariant::DeliveredAfterFinal,
                        "delivered by a pop invoked after an acknowledged cancel or finish".into(),
                        vec![fin, pop],
                    ));
                }
            }
        }
    }

    /// (e) The last successful get of an acknowledged add shows it settled.
    fn settled(&self, out: &mut Vec<Violation>) {
        if self.acked_adds().next().is_none() {
            return;
        }
        let last_get = self
            .ops
            .iter()
            .copied()
            .filter(|e| e.is_ok() && matches!(e.op, Op::Get { .. }))
            .max_by_key(|e| e.completed_us);
        match last_get {
            Some(get) => {
                if let Outcome::Ok(Answer::Found { state }) = get.outcome
                    && !state.is_settled()
                {
                    // Its whole story, to see where it got stuck.
                    let mut events: Vec<&Event> = self.ops.clone();
                    events.extend(self.deliveries.iter().map(|&(pop, _)| pop));
                    events.sort_by_key(|e| e.invoked_us);
                    out.push(self.violation(
                        Invariant::NotSettled,
                        format!("still {state:?} at the last get"),
                        events,
                    ));
                }
            }
            None => {
                let add = self.acked_adds().next().into_iter().collect();
                out.push(self.violation(
                    Invariant::NotSettled,
                    "never read back with a get".into(),
                    add,
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
