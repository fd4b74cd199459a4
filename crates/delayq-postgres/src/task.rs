//! One task's row as Rust reads and writes it, and the transitions of one task: the same
//! decisions as the engine's shard (`delayq/src/storage/engine/shard.rs`), asked of
//! [`delayq_core::lifecycle`], applied to a row that the transaction holds locked.

use std::collections::VecDeque;

use delayq_core::lifecycle::{self, AfterFailure, Op};
use delayq_core::{
    Attempt, Backoff, Delivery, EXPIRED, MaxRetries, Millis, OnExpire, State, TaskInfo, TaskSpec,
    TraceContext,
};
use serde::{Deserialize, Serialize};
use tokio_postgres::Row;

use delayq::{Error, Result};

/// The columns every read of a whole task selects, in [`Task::from_row`]'s order.
pub(crate) const COLUMNS: &str = "topic, id, state, priority, due_ms, seq, deadline_ms, \
     updated_at_ms, created_at_ms, receipt, retries, ttr_ms, max_retries, expires_at_ms, \
     on_expire, key, body, trace, extra";

/// The same columns prefixed by the table alias `t.` (for joins).
pub(crate) const T_COLUMNS: &str = "t.topic, t.id, t.state, t.priority, t.due_ms, t.seq, \
     t.deadline_ms, t.updated_at_ms, t.created_at_ms, t.receipt, t.retries, t.ttr_ms, \
     t.max_retries, t.expires_at_ms, t.on_expire, t.key, t.body, t.trace, t.extra";

/// What only tasks that failed or carry a backoff need, stored as one JSON column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Extra {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "VecDeque::is_empty")]
    pub history: VecDeque<Attempt>,
}

impl Extra {
    fn is_empty(&self) -> bool {
        *self == Extra::default()
    }
}

/// A task's row.
#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub topic: String,
    pub id: String,
    pub state: State,
    pub priority: u32,
    pub due_ms: Millis,
    pub seq: i64,
    /// ACTIVE: the ttr deadline; FINISHED/CANCELLED: when the record goes; otherwise 0.
    pub deadline_ms: Millis,
    pub updated_at_ms: Millis,
    pub created_at_ms: Millis,
    pub receipt: Option<String>,
    pub retries: u32,
    pub ttr_ms: u64,
    pub max_retries: MaxRetries,
    pub expires_at_ms: Option<Millis>,
    pub on_expire: OnExpire,
    pub key: Option<String>,
    pub body: Vec<u8>,
    pub trace: Option<TraceContext>,
    pub extra: Extra,
}

/// A millisecond instant or duration as the database stores it (bigint). Values past
/// `i64::MAX` cannot come from validated input (10 years at most); they are clamped.
pub(crate) fn db(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A bigint from the database as milliseconds (negative values, which delayq never writes,
/// read as 0).
pub(crate) fn ms(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// The state of a stored code; an unknown code is a storage error naming it.
pub(crate) fn state_of(code: i16) -> Result<State> {
    u8::try_from(code)
        .ok()
        .and_then(State::from_code)
        .ok_or_else(|| crate::error::corrupt(format!("unknown task state code {code}")))
}

fn on_expire_code(on: OnExpire) -> i16 {
    match on {
        OnExpire::Dead => 0,
        OnExpire::Drop => 1,
    }
}

impl Task {
    /// A new task from a validated spec, in the state its due gives at `now`.
    pub fn new(spec: TaskSpec, now: Millis) -> Task {
        Task {
            state: lifecycle::scheduled_state(spec.due_ms, now),
            topic: spec.topic,
            id: spec.id,
            priority: spec.priority,
            due_ms: spec.due_ms,
            seq: 0,
            deadline_ms: 0,
            updated_at_ms: now,
            created_at_ms: spec.created_at_ms,
            receipt: None,
            retries: 0,
            ttr_ms: spec.ttr_ms,
            max_retries: spec.max_retries,
            expires_at_ms: spec.expires_at_ms,
            on_expire: spec.on_expire,
            key: spec.key,
            body: spec.body,
            trace: spec.trace,
            extra: Extra {
                backoff: spec.backoff,
                ..Extra::default()
            },
        }
    }

    /// Reads a row selected with [`COLUMNS`] (or [`T_COLUMNS`]) first.
    pub fn from_row(row: &Row) -> Result<Task> {
        let get = |e: tokio_postgres::Error| crate::error::corrupt(e.to_string());
        let trace: Option<serde_json::Value> = row.try_get(17).map_err(get)?;
        let extra: Option<serde_json::Value> = row.try_get(18).map_err(get)?;
        let max_retries: i64 = row.try_get(12).map_err(get)?;
        Ok(Task {
            topic: row.try_get(0).map_err(get)?,
            id: row.try_get(1).map_err(get)?,
            state: state_of(row.try_get(2).map_err(get)?)?,
            priority: u32::try_from(row.try_get::<_, i64>(3).map_err(get)?).unwrap_or(u32::MAX),
            due_ms: ms(row.try_get(4).map_err(get)?),
            seq: row.try_get(5).map_err(get)?,
            deadline_ms: ms(row.try_get(6).map_err(get)?),
            updated_at_ms: ms(row.try_get(7).map_err(get)?),
            created_at_ms: ms(row.try_get(8).map_err(get)?),
            receipt: row.try_get(9).map_err(get)?,
            retries: u32::try_from(row.try_get::<_, i32>(10).map_err(get)?).unwrap_or(0),
            ttr_ms: ms(row.try_get(11).map_err(get)?),
            max_retries: if max_retries < 0 {
                MaxRetries::Unlimited
            } else {
                MaxRetries::Limited(u32::try_from(max_retries).unwrap_or(u32::MAX))
            },
            expires_at_ms: row.try_get::<_, Option<i64>>(13).map_err(get)?.map(ms),
            on_expire: if row.try_get::<_, i16>(14).map_err(get)? == 1 {
                OnExpire::Drop
            } else {
                OnExpire::Dead
            },
            key: row.try_get(15).map_err(get)?,
            body: row.try_get(16).map_err(get)?,
            trace: match trace {
                Some(v) => Some(
                    serde_json::from_value(v)
                        .map_err(|e| crate::error::corrupt(format!("trace column: {e}")))?,
                ),
                None => None,
            },
            extra: match extra {
                Some(v) => serde_json::from_value(v)
                    .map_err(|e| crate::error::corrupt(format!("extra column: {e}")))?,
                None => Extra::default(),
            },
        })
    }

    /// The JSON of the trace column.
    pub fn trace_json(&self) -> Option<serde_json::Value> {
        self.trace
            .as_ref()
            .and_then(|t| serde_json::to_value(t).ok())
    }

    /// The JSON of the extra column (`NULL` when empty, the common case).
    pub fn extra_json(&self) -> Option<serde_json::Value> {
        (!self.extra.is_empty())
            .then(|| serde_json::to_value(&self.extra).ok())
            .flatten()
    }

    /// The code of the on_expire column.
    pub fn on_expire_code(&self) -> i16 {
        on_expire_code(self.on_expire)
    }

    /// The max_retries column (`-1`: no limit).
    pub fn max_retries_db(&self) -> i64 {
        self.max_retries.as_i64()
    }

    /// The delivery handed to a consumer for the current attempt.
    pub fn delivery(&self) -> Delivery {
        Delivery {
            id: self.id.clone(),
            topic: self.topic.clone(),
            body: self.body.clone(),
            priority: self.priority,
            retries: self.retries,
            receipt: self.receipt.clone().unwrap_or_default(),
            due_ms: self.due_ms,
            ttr_ms: self.ttr_ms,
            trace: self.trace.clone(),
            key: self.key.clone(),
        }
    }

    /// The full view of the task.
    pub fn info(self) -> TaskInfo {
        TaskInfo {
            delay_ms: self.due_ms.saturating_sub(self.created_at_ms),
            max_retries: self.max_retries.as_i64(),
            deadline_ms: (self.deadline_ms != 0).then_some(self.deadline_ms),
            id: self.id,
            topic: self.topic,
            body: self.body,
            priority: self.priority,
            state: self.state,
            due_ms: self.due_ms,
            ttr_ms: self.ttr_ms,
            retries: self.retries,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            backoff: self.extra.backoff,
            last_error: self.extra.last_error,
            history: self.extra.history.into(),
            trace: self.trace,
            expires_at_ms: self.expires_at_ms,
            on_expire: self.on_expire,
            key: self.key,
        }
    }

    /// Refuses `op` unless the state allows it and, for an ACTIVE task, the receipt matches.
    pub fn check(&self, op: Op, receipt: Option<&str>) -> Result<()> {
        let refuse = |refusal| Error::conflict(&self.topic, &self.id, refusal);
        lifecycle::check_op(self.state, op).map_err(refuse)?;
        if self.state == State::Active {
            lifecycle::check_receipt(self.receipt.as_deref().unwrap_or(""), receipt)
                .map_err(refuse)?;
        }
        Ok(())
    }

    /// Puts the task into `state` with due `due` at `now`: the deadline and receipt follow
    /// from the state as in the engine (`retention_ms` for FINISHED and CANCELLED).
    pub fn enter(&mut self, state: State, due: Millis, now: Millis, retention_ms: u64) {
        self.state = state;
        self.due_ms = due;
        self.updated_at_ms = now;
        match state {
            State::Active => {}
            State::Finished | State::Cancelled => {
                self.deadline_ms = now.saturating_add(retention_ms)
            }
            State::Delayed | State::Ready | State::Dead => self.deadline_ms = 0,
        }
        if state != State::Active {
            self.receipt = None;
        }
    }

    /// Makes the task ACTIVE for a new attempt with `receipt` at `now`, its ttr counted from
    /// `start` (the clock's upper bound, docs/clock.md) or from the task's last change if that
    /// is later. `now` is read when the transaction begins; a tick that committed since, at a
    /// later `now`, may have made this very task READY again (its ttr expired), and a ttr
    /// counted from the older reading could end before it began.
    pub fn activate(&mut self, receipt: String, now: Millis, start: Millis) {
        let due = self.due_ms;
        self.receipt = Some(receipt);
        self.deadline_ms = start.max(self.updated_at_ms).saturating_add(self.ttr_ms);
        self.enter(State::Active, due, now, 0);
    }

    /// Remembers a failed attempt and its error.
    pub fn push_failure(&mut self, now: Millis, outcome: &str, error: Option<String>) {
        let attempt = Attempt {
            started_at_ms: self.updated_at_ms,
            ended_at_ms: now,
            outcome: outcome.to_owned(),
            error,
        };
        attempt.remember(&mut self.extra.history, &mut self.extra.last_error);
    }

    /// A failed attempt (release, ttr expiry): what [`lifecycle::after_failure`] decides.
    /// Returns what became of the task; the caller writes (or, for [`Failed::Expired`] with
    /// `on_expire: drop`, deletes) the row.
    pub fn fail(
        &mut self,
        now: Millis,
        delay: Option<u64>,
        outcome: &str,
        error: Option<String>,
        max_error_bytes: usize,
    ) -> Failed {
        let error = error.map(|mut e| {
            delayq_core::validate::truncate_utf8(&mut e, max_error_bytes);
            e
        });
        self.push_failure(now, outcome, error);
        let next = lifecycle::after_failure(
            self.max_retries,
            self.extra.backoff.as_ref(),
            self.retries,
            now,
            delay,
        );
        match next {
            AfterFailure::Retry { retries, .. }
                if lifecycle::is_expired(self.expires_at_ms, now) =>
            {
                // It came back after its expiry: it expires now instead of another delivery.
                self.retries = retries;
                Failed::Expired(self.expire(now))
            }
            AfterFailure::Retry { retries, due_ms } => {
                self.retries = retries;
                let state = lifecycle::scheduled_state(due_ms, now);
                // An immediate redelivery keeps its original due so it goes to the front.
                let due = if state == State::Ready {
                    self.due_ms
                } else {
                    due_ms
                };
                self.enter(state, due, now, 0);
                Failed::Again(state)
            }
            AfterFailure::Dead => {
                let due = self.due_ms;
                self.enter(State::Dead, due, now, 0);
                Failed::Dead
            }
        }
    }

    /// A task whose expiry passed before it was handed out: DEAD with the last error
    /// `expired`, or to be deleted (`on_expire: drop`).
    pub fn expire(&mut self, now: Millis) -> Expired {
        match self.on_expire {
            OnExpire::Drop => Expired::Drop,
            OnExpire::Dead => {
                self.extra.last_error = Some(EXPIRED.to_owned());
                let due = self.due_ms;
                self.enter(State::Dead, due, now, 0);
                Expired::Dead
            }
        }
    }

    /// DEAD → READY with retries reset and the expiry forgotten (an operator's explicit act).
    pub fn requeue(&mut self, now: Millis) {
        self.retries = 0;
        self.expires_at_ms = None;
        self.on_expire = OnExpire::Dead;
        let due = self.due_ms;
        self.enter(State::Ready, due, now, 0);
    }
}

/// What a failed attempt did to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// It goes round again, in this state (READY or DELAYED).
    Again(State),
    /// It is DEAD, out of retries.
    Dead,
    /// It came back after its expiry and expired.
    Expired(Expired),
}

impl Failed {
    /// The state the caller reports (a dropped task reports DEAD: it will not come back).
    pub fn state(self) -> State {
        match self {
            Failed::Again(s) => s,
            Failed::Dead | Failed::Expired(_) => State::Dead,
        }
    }
}

/// What an expiry does to the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    /// The row stays, DEAD.
    Dead,
    /// The row is deleted.
    Drop,
}

#[cfg(test)]
mod tests {
    use super::Task;

    /// A task READY since 1 000 (its last change), ttr 30 s.
    fn ready_since(at: u64) -> Task {
        let spec = delayq::core::validate::validate_task(
            delayq::NewTask::new("t", "a").ttr_ms(30_000),
            &delayq::Limits::default(),
            &delayq::TaskDefaults::default(),
            at,
        )
        .unwrap();
        Task::new(spec, at)
    }

    /// A ttr starts at the clock's upper bound, or at the task's last change if that is later
    /// (a tick that committed after this transaction read its clock).
    #[test]
    fn a_ttr_starts_at_the_upper_bound_or_the_last_change() {
        for (now, start, changed, deadline, why) in [
            (5_000, 5_000, 1_000, 35_000, "an exact clock"),
            (
                5_000,
                5_002,
                1_000,
                35_002,
                "the upper bound of an interval",
            ),
            (
                5_000,
                5_000,
                6_000,
                36_000,
                "changed by a later tick: from then",
            ),
        ] {
            let mut task = ready_since(changed);
            task.activate("r".to_owned(), now, start);
            assert_eq!(task.deadline_ms, deadline, "{why}");
            assert_eq!(task.updated_at_ms, now, "{why}: the attempt starts now");
        }
    }
}
