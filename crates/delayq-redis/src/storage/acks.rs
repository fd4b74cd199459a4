//! The transitions of one task: finish, release, touch, cancel, requeue, delete, bury,
//! reschedule, kick-job, take (reserve-job) and requeue-all.
//!
//! Each is one script over the keys of the task's partition, which checks the state and the
//! receipt itself; [`InstanceState::task_op`] runs it, applies its effects, waits for replicas when
//! asked, and turns its refusals into the errors the in-memory engine gives. Requeue-all
//! pages through each partition's DEAD set, [`REQUEUE_CHUNK`] tasks per script.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::InstanceState;
use super::permits::GRANT_GRACE_MS;
use crate::error::{BackendError, maybe_applied};
use crate::keys::partition_of;
use crate::record::parse_trace_text;
use crate::scripts::{Reply, SCRIPTS, Script, ScriptInvocation, Status, bytes, int, text};
use delayq::core::lifecycle::{Op, Refusal};
use delayq::storage::coalesce::ConsumerCall;
use delayq::{BuryOptions, Delivery, Error, Held, Millis, ReleaseOptions, Result, State};

/// The engine's error for a refusal of the single-task script that did `what` to task `id`
/// of `topic` (`op`: the operation refused; `None` for delete, which is never refused).
fn refusal(status: Status, topic: &str, id: &str, op: Option<Op>, what: &str) -> Error {
    match status {
        Status::NotFound => Error::not_found(topic, id),
        Status::WrongState(code) => match (State::from_code(code), op) {
            (Some(state), Some(op)) => {
                Error::conflict(topic, id, Refusal::WrongState { state, op })
            }
            (None, _) => BackendError::protocol(what, format!("state {code}")).into(),
            (_, None) => BackendError::protocol(what, "a refusal of delete").into(),
        },
        Status::StaleReceipt => Error::conflict(topic, id, Refusal::StaleReceipt),
        // Only reschedule refuses so; it puts the due it asked for in (`reschedule`).
        Status::PastExpiry(expires_at_ms) => Error::conflict(
            topic,
            id,
            Refusal::PastExpiry {
                due_ms: 0,
                expires_at_ms,
            },
        ),
        Status::Ok | Status::Fenced(_) | Status::NeedsPermit => {
            BackendError::protocol(what, format!("{status:?} is no refusal")).into()
        }
    }
}

/// Every how many ack-and-next calls on an instance one takes its next task by a pop across
/// all of the topic's partitions ([`next_from`]).
const FAIR_TURN: u64 = 8;

/// Where an ack-and-next of a task in partition `held` of a topic of `parts` partitions
/// takes its next task from, on the instance's `turn`-th such call: that partition
/// (`Some`), or all of them by a planned pop (`None`).
///
/// From the held task's partition it is one script for both, where a planned pop is a look
/// at every partition first. But a consumer that always stays leaves a partition without
/// consumers while the others have ready tasks; on every [`FAIR_TURN`]th call it takes the
/// best task of the topic instead, so consumers drift to the partition whose ready tasks
/// wait longest.
fn next_from(parts: u32, held: u32, turn: u64) -> Option<u32> {
    (parts == 1 || !turn.is_multiple_of(FAIR_TURN)).then_some(held)
}

/// Most DEAD tasks one requeue-all script moves.
const REQUEUE_CHUNK: usize = 1_000;

/// How many times a touch asks for a longer permit (topic-wide limits) before giving up: once
/// is enough unless the touch comes more than the grace after it.
const TOUCH_ATTEMPTS: usize = 3;

/// A single-task script to run: which, for what, with which arguments after the task id.
struct TaskOp<'a> {
    script: &'a Script,
    /// The operation, for refusals; `None` for delete, which applies in every state.
    op: Option<Op>,
    /// What is being done, for errors ("finishing").
    verb: &'a str,
    args: &'a [&'a str],
}

impl<'a> TaskOp<'a> {
    fn new(script: &'a Script, op: Option<Op>, verb: &'a str) -> Self {
        TaskOp {
            script,
            op,
            verb,
            args: &[],
        }
    }

    fn args(self, args: &'a [&'a str]) -> Self {
        TaskOp { args, ..self }
    }
}

impl InstanceState {
    /// Runs one script of partition `p` and applies the effects it reports, giving back the
    /// permits of the tasks that left ACTIVE (topic-wide limits, `permits.rs`) before it
    /// returns, so the caller's next pop finds their slots free.
    pub(super) async fn run_one(
        &self,
        what: &str,
        inv: &ScriptInvocation<'_>,
        topic: &str,
        p: u32,
    ) -> Result<Reply, BackendError> {
        let value = self
            .redis
            .io(what, inv.invoke_async(&mut self.redis.conn()))
            .await?;
        let reply = Reply::parse(value, what)?;
        self.effects(topic, p, &reply);
        self.free_permits(topic, &reply.freed).await;
        Ok(reply)
    }

    /// Runs a single-task script and turns its refusals into the engine's errors.
    async fn task_op(&self, topic: &str, id: &str, t: TaskOp<'_>) -> Result<Reply> {
        self.check_open()?;
        let what = format!("{} task {id:?} of topic {topic:?}", t.verb);
        let Some(parts) = self.partitions(topic, false).await? else {
            return Err(Error::not_found(topic, id));
        };
        let p = partition_of(id, parts);
        let pk = self.keys.partition(topic, p);
        let now = self.ctx.clock.now_ms();
        let mut inv = self.invocation(t.script, &pk, topic, p, now);
        inv.arg(id);
        for a in t.args {
            inv.arg(*a);
        }
        let mark = self.redis.mark();
        let reply = self.run_one(&what, &inv, topic, p).await?;
        match reply.status {
            // A touch's ask for a longer permit: its caller's to answer (`touch`).
            Status::NeedsPermit => Ok(reply),
            Status::Ok => {
                self.redis
                    .replicated(&what, [pk.base.as_str()], mark)
                    .await
                    .map_err(maybe_applied)?;
                Ok(reply)
            }
            refused => Err(refusal(refused, topic, id, t.op, &what)),
        }
    }

    /// Ack and take the next: finishes `held`, then pops `topic` (see
    /// [`delayq::TaskStore::finish_then_pop`]). When the held task is of `topic`, both are
    /// one call of a `consume` script on the held task's partition (`consume.rs`): one round
    /// trip a task for a consumer loop, shared with the other consumers. With several
    /// partitions the next task so comes from the held task's partition, not from the best
    /// of all of them (rule 11 across partitions is best effort, docs/storage.md), except on
    /// a fair turn ([`next_from`]); what that partition lacks comes from a pop across the
    /// topic. A held task of another topic: the finish, then the pop.
    pub(super) async fn finish_then_pop(
        self: &Arc<Self>,
        held: Held<'_>,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> Result<Result<Vec<Delivery>>> {
        self.check_open()?;
        let parts = if held.topic == topic {
            self.partitions(topic, false).await?
        } else {
            None
        };
        let turn = self.ack_turns.fetch_add(1, Ordering::Relaxed);
        let from = parts.and_then(|n| next_from(n, partition_of(held.id, n), turn));
        let (Some(parts), Some(p)) = (parts, from) else {
            self.finish(held.topic, held.id, held.receipt).await?;
            return Ok(self.pop(&[topic], max, auto_finish).await);
        };
        let call = ConsumerCall::finish_then_pop(held.id, held.receipt, max, auto_finish);
        let consumed = self.consume(topic, p, call).await?;
        if let Some(status) = consumed.refused {
            let what = format!("finishing task {:?} of topic {topic:?}", held.id);
            return Err(refusal(status, topic, held.id, Some(Op::Finish), &what));
        }
        let mut tasks = consumed.tasks;
        if parts == 1 || tasks.len() >= max {
            return Ok(Ok(tasks));
        }
        // The held task's partition had too few ready: the rest from across the topic.
        match self.pop(&[topic], max - tasks.len(), auto_finish).await {
            Ok(more) => {
                tasks.extend(more);
                tasks.sort_by_key(|d| (d.priority, d.due_ms));
                Ok(Ok(tasks))
            }
            Err(e) if tasks.is_empty() => Ok(Err(e)),
            Err(e) => {
                // The tasks taken are the consumer's now (ACTIVE); the error is only that
                // there are not more of them.
                tracing::warn!(topic, error = %e, "popping the rest of an ack and take the next");
                Ok(Ok(tasks))
            }
        }
    }

    /// ACTIVE → FINISHED, in one `consume` script with the other consumers' calls on its
    /// partition.
    pub(super) async fn finish(
        self: &Arc<Self>,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
    ) -> Result<()> {
        self.check_open()?;
        let Some(parts) = self.partitions(topic, false).await? else {
            return Err(Error::not_found(topic, id));
        };
        let call = ConsumerCall::finish(id, receipt);
        let consumed = self.consume(topic, partition_of(id, parts), call).await?;
        match consumed.refused {
            None => Ok(()),
            Some(status) => {
                let what = format!("finishing task {id:?} of topic {topic:?}");
                Err(refusal(status, topic, id, Some(Op::Finish), &what))
            }
        }
    }

    /// A failed attempt: ACTIVE → READY, DELAYED or DEAD, decided by the script.
    pub(super) async fn release(
        &self,
        topic: &str,
        id: &str,
        options: ReleaseOptions,
    ) -> Result<State> {
        // The script adds the delay to the clock's upper reading (see `Header::upper`), so
        // the new due is never before the release plus the delay.
        let delay = options.delay_ms.map(|d| d.to_string()).unwrap_or_default();
        let error = options.error.map(|mut e| {
            delayq_core::validate::truncate_utf8(&mut e, self.ctx.limits.max_error_bytes);
            e
        });
        let priority = options.priority.map(|p| p.to_string()).unwrap_or_default();
        let args = [
            options.receipt.as_deref().unwrap_or(""),
            &delay,
            if error.is_some() { "1" } else { "0" },
            error.as_deref().unwrap_or(""),
            &priority,
        ];
        let op = TaskOp::new(&SCRIPTS.release, Some(Op::Release), "releasing").args(&args);
        let reply = self.task_op(topic, id, op).await?;
        let code = reply.payload.first().and_then(int).unwrap_or(-1);
        u8::try_from(code)
            .ok()
            .and_then(State::from_code)
            .ok_or_else(|| BackendError::protocol("releasing", format!("state {code}")).into())
    }

    /// ACTIVE: restarts the ttr; returns the new deadline. With topic-wide limits the task's
    /// permit is held longer first (`permits.rs`): the script says so, the permit is held
    /// until the new window's end, and the touch goes again within it.
    pub(super) async fn touch(
        &self,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
    ) -> Result<Millis> {
        let mut held = String::new();
        for _ in 0..TOUCH_ATTEMPTS {
            let args = [receipt.unwrap_or(""), held.as_str()];
            let op = TaskOp::new(&SCRIPTS.touch, Some(Op::Touch), "touching").args(&args);
            let reply = self.task_op(topic, id, op).await?;
            let p = &reply.payload;
            if reply.status != Status::NeedsPermit {
                return p
                    .first()
                    .and_then(int)
                    .and_then(|d| u64::try_from(d).ok())
                    .ok_or_else(|| BackendError::protocol("touching", "no deadline").into());
            }
            let bad = || BackendError::protocol("touching", "a bad ask for a permit");
            let holder = p.first().and_then(text).ok_or_else(bad)?;
            let key = p.get(1).and_then(text).ok_or_else(bad)?;
            let ttr = p.get(2).and_then(int).and_then(|t| u64::try_from(t).ok());
            let now = self.ctx.clock.now_ms();
            let until = self.ctx.clock.window_start(now) + ttr.ok_or_else(bad)? + GRANT_GRACE_MS;
            if !self.hold_permit(topic, &holder, &key, until, false).await? {
                // Its permit's time passed (so did its ttr) and the topic has no room: as far
                // as the limits go, the task is READY again, for another consumer.
                return Err(Error::conflict(
                    topic,
                    id,
                    Refusal::WrongState {
                        state: State::Ready,
                        op: Op::Touch,
                    },
                ));
            }
            held = until.to_string();
        }
        Err(BackendError::protocol("touching", "the touch kept outrunning its permit").into())
    }

    /// DELAYED, READY or ACTIVE → CANCELLED.
    pub(super) async fn cancel(&self, topic: &str, id: &str) -> Result<()> {
        let op = TaskOp::new(&SCRIPTS.cancel, Some(Op::Cancel), "cancelling");
        self.task_op(topic, id, op).await.map(drop)
    }

    /// DEAD → READY, retries reset.
    pub(super) async fn requeue(&self, topic: &str, id: &str) -> Result<()> {
        let op = TaskOp::new(&SCRIPTS.requeue, Some(Op::Requeue), "requeueing");
        self.task_op(topic, id, op).await.map(drop)
    }

    /// ACTIVE → DEAD, the attempt ending as "buried" (rule 13).
    pub(super) async fn bury(&self, topic: &str, id: &str, options: BuryOptions) -> Result<()> {
        let error = options.error.map(|mut e| {
            delayq_core::validate::truncate_utf8(&mut e, self.ctx.limits.max_error_bytes);
            e
        });
        let priority = options.priority.map(|p| p.to_string()).unwrap_or_default();
        let args = [
            options.receipt.as_deref().unwrap_or(""),
            if error.is_some() { "1" } else { "0" },
            error.as_deref().unwrap_or(""),
            &priority,
        ];
        let op = TaskOp::new(&SCRIPTS.bury, Some(Op::Bury), "burying").args(&args);
        self.task_op(topic, id, op).await.map(drop)
    }

    /// DELAYED or READY → due at `due_ms` (rule 15); returns the new state.
    pub(super) async fn reschedule(&self, topic: &str, id: &str, due_ms: Millis) -> Result<State> {
        let due = due_ms.to_string();
        let args = [due.as_str()];
        let op = TaskOp::new(&SCRIPTS.reschedule, Some(Op::Reschedule), "rescheduling").args(&args);
        let reply = self.task_op(topic, id, op).await.map_err(|e| match e {
            Error::Conflict {
                topic,
                id,
                refusal: Refusal::PastExpiry { expires_at_ms, .. },
            } => Error::Conflict {
                topic,
                id,
                refusal: Refusal::PastExpiry {
                    due_ms,
                    expires_at_ms,
                },
            },
            e => e,
        })?;
        let code = reply.payload.first().and_then(int).unwrap_or(-1);
        u8::try_from(code)
            .ok()
            .and_then(State::from_code)
            .ok_or_else(|| BackendError::protocol("rescheduling", format!("state {code}")).into())
    }

    /// DEAD or DELAYED → READY (beanstalkd's kick-job).
    pub(super) async fn kick_job(&self, topic: &str, id: &str) -> Result<()> {
        let op = TaskOp::new(&SCRIPTS.kick, Some(Op::Kick), "kicking");
        self.task_op(topic, id, op).await.map(drop)
    }

    /// READY, DELAYED or DEAD → ACTIVE by id (beanstalkd's reserve-job), paused or not.
    pub(super) async fn take(&self, topic: &str, id: &str) -> Result<Delivery> {
        let prefix = self.receipts.prefix();
        let args = [prefix.as_str()];
        let op = TaskOp::new(&SCRIPTS.take, Some(Op::Take), "taking").args(&args);
        let reply = self.task_op(topic, id, op).await?;
        let what = "taking a task";
        let p = &reply.payload;
        if p.get(9).and_then(int) == Some(1) {
            // Topic-wide limits: the task holds a permit like a popped one (it is ACTIVE
            // whatever the limits say: reserve-job is an operator's act).
            let bad = || BackendError::protocol(what, "no receipt, deadline or key");
            let receipt = p.get(2).and_then(text).ok_or_else(bad)?;
            let deadline = p.get(7).and_then(int).and_then(|d| u64::try_from(d).ok());
            let key = p.get(8).and_then(text).ok_or_else(bad)?;
            self.hold_permit(topic, &receipt, &key, deadline.ok_or_else(bad)?, true)
                .await
                .map_err(maybe_applied)?;
        }
        let num = |i: usize| p.get(i).and_then(int).and_then(|v| u64::try_from(v).ok());
        let delivery = (|| {
            Some(Delivery {
                id: id.to_owned(),
                topic: topic.to_owned(),
                body: bytes(p.first()?)?,
                retries: u32::try_from(num(1)?).ok()?,
                receipt: text(p.get(2)?)?,
                due_ms: num(3)?,
                ttr_ms: num(4)?,
                priority: u32::try_from(num(5)?).ok()?,
                trace: match text(p.get(6)?)?.as_str() {
                    "" => None,
                    field => Some(parse_trace_text(field)?),
                },
                key: Some(text(p.get(8)?)?).filter(|k| !k.is_empty()),
            })
        })();
        delivery.ok_or_else(|| BackendError::protocol(what, "a task with a bad field").into())
    }

    /// Removes a task in any state.
    pub(super) async fn delete(&self, topic: &str, id: &str) -> Result<()> {
        let op = TaskOp::new(&SCRIPTS.delete, None, "deleting");
        self.task_op(topic, id, op).await.map(drop)
    }

    /// Requeues every DEAD task of `topic`; returns how many.
    pub(super) async fn requeue_all(&self, topic: &str) -> Result<u64> {
        self.check_open()?;
        let Some(parts) = self.partitions(topic, false).await? else {
            return Ok(0);
        };
        let what = format!("requeueing the dead tasks of topic {topic:?}");
        let mut total = 0;
        for p in 0..parts {
            let pk = self.keys.partition(topic, p);
            let mark = self.redis.mark();
            // Page through the partition's DEAD set, one bounded script at a time.
            loop {
                let now = self.ctx.clock.now_ms();
                let mut inv = self.invocation(&SCRIPTS.requeue, &pk, topic, p, now);
                inv.arg("").arg(REQUEUE_CHUNK);
                // Once a task was requeued, a later failure leaves that done.
                let reply = self.run_one(&what, &inv, topic, p).await.map_err(|e| {
                    if total > 0 {
                        maybe_applied(e)
                    } else {
                        Error::from(e)
                    }
                })?;
                let n = reply.payload.first().and_then(int).unwrap_or(0).max(0) as u64;
                let scanned = reply.payload.get(1).and_then(int).unwrap_or(0).max(0) as u64;
                total += n;
                if scanned < REQUEUE_CHUNK as u64 {
                    break;
                }
            }
            self.redis
                .replicated(&what, [pk.base.as_str()], mark)
                .await
                .map_err(maybe_applied)?;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_task_comes_from_the_held_tasks_partition_but_on_a_fair_turn() {
        // (partitions, the held task's partition, turn) -> where the next comes from.
        let table = [
            ((1, 0, 0), Some(0)),
            ((1, 0, FAIR_TURN), Some(0)),
            ((4, 2, 0), None),
            ((4, 2, 1), Some(2)),
            ((4, 2, FAIR_TURN - 1), Some(2)),
            ((4, 2, FAIR_TURN), None),
            ((4, 3, 3 * FAIR_TURN + 5), Some(3)),
            ((16, 9, u64::MAX - u64::MAX % FAIR_TURN), None),
        ];
        for ((parts, held, turn), want) in table {
            assert_eq!(
                next_from(parts, held, turn),
                want,
                "{parts} partitions, held in {held}, turn {turn}"
            );
        }
        // One turn in FAIR_TURN looks across the topic, whatever the start.
        let fair = (100..100 + 8 * FAIR_TURN)
            .filter(|&t| next_from(4, 1, t).is_none())
            .count();
        assert_eq!(fair, 8);
    }
}
