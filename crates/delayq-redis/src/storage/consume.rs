//! Consumers' calls on one partition, several in one `consume` script: finish, pop, and both
//! (ack and take the next).
//!
//! A finish, a pop of a topic with one partition (the default on one Redis), and a finish
//! followed by a pop of the same partition join the partition's queue of consumer calls
//! ([`delayq::storage::coalesce`]); one `consume` script serves a round of them: first the round's
//! finishes in the order the calls came, then its pops in that order (one order in which the
//! concurrent calls could have come), each as it would be served alone: a finish checks its
//! state and receipt, a pop after a refused finish takes nothing, the flow limits bound each
//! pop in turn. What is due is promoted once per script instead of once per pop, the pops'
//! writes go as one command per key, and fifty consumers cost Redis a few scripts a round
//! trip instead of fifty.
//!
//! Every caller gets only its own outcome. A finish is acknowledged, as before, only after
//! the script that did it replied and, with `wait_replicas`, after the `WAIT` that follows
//! it; a failed `WAIT` fails the finishes of that script, not the pops beside them (their
//! tasks are handed out either way, as a pop's are). A script that fails fails every call
//! of its round.

use std::sync::Arc;

use delayq::storage::coalesce::{Coalescer, ConsumerCall};
use delayq::{Delivery, Result};
use redis::Value;

use super::pop::{POP_VALUES, parse_deliveries};
use super::{InstanceState, Slot};
use crate::error::{BackendError, maybe_applied};
use crate::scripts::{Events, SCRIPTS, Status, int};

/// Most tasks one `consume` script hands out: receipts count them in 4 hex digits, and a
/// script this size keeps Redis free for other clients between rounds.
const ROUND_TASKS: usize = 1_000;
/// Most calls one `consume` script serves.
const ROUND_CALLS: usize = 256;

/// What one call got.
#[derive(Debug)]
pub(super) struct Consumed {
    /// The finish's refusal (then nothing was popped).
    pub refused: Option<Status>,
    /// The tasks handed out, in rule 11's order.
    pub tasks: Vec<Delivery>,
}

/// The consumer calls waiting to share a script, by partition.
pub(crate) type Consumers = Coalescer<Slot, ConsumerCall, Consumed>;

impl InstanceState {
    /// Serves `call` on partition `p` of `topic` in one script with the other consumer calls
    /// queued for it.
    pub(super) async fn consume(
        self: &Arc<Self>,
        topic: &str,
        p: u32,
        call: ConsumerCall,
    ) -> Result<Consumed> {
        let state = Arc::clone(self);
        self.consumers
            .call(
                (topic.to_owned(), p),
                call,
                "finishing and popping tasks",
                move |slot| {
                    tokio::spawn(state.flush_consumers(slot));
                },
            )
            .await
    }

    /// Runs the queued consumer calls of one partition, a script per round, until its queue
    /// is empty.
    async fn flush_consumers(self: Arc<Self>, slot: Slot) {
        let fits = || ConsumerCall::fits_round(ROUND_TASKS, ROUND_CALLS);
        let (this, slot) = (&self, &slot);
        self.consumers
            .serve(slot, fits, move |round| async move {
                Ok(this.run_consume(slot, &round).await?)
            })
            .await
    }

    /// One `consume` script for `calls` on `slot`: each call's outcome, in order.
    async fn run_consume(
        &self,
        slot: &Slot,
        calls: &[ConsumerCall],
    ) -> Result<Vec<Result<Consumed>>, BackendError> {
        let (topic, p) = (slot.0.as_str(), slot.1);
        let what = ConsumerCall::describe(topic, calls, "script");
        let pk = self.keys.partition(topic, p);
        let now = self.ctx.clock.now_ms();
        let mut inv = self.invocation(&SCRIPTS.consume, &pk, topic, p, now);
        inv.arg(self.receipts.prefix())
            .arg(self.options.promote_batch)
            .arg(calls.len());
        for c in calls {
            let (id, receipt) = match &c.held {
                Some((id, receipt)) => (id.as_str(), receipt.as_deref().unwrap_or("")),
                None => ("", ""),
            };
            inv.arg(id)
                .arg(receipt)
                .arg(c.max)
                .arg(if c.auto_finish { "1" } else { "0" });
        }
        let mark = self.redis.mark();
        let reply = self.run_one(&what, &inv, topic, p).await?;
        let parsed = parse_consume(topic, &reply.payload, calls.len(), &what)?;
        self.wake_at_pause_end(topic, parsed.pause);
        self.record_events(topic, &parsed.promoted, now);
        let finished = parsed
            .answers
            .iter()
            .zip(calls)
            .any(|(a, c)| c.held.is_some() && a.refused.is_none());
        let replicated = if finished {
            self.redis
                .replicated(&what, [pk.base.as_str()], mark)
                .await
                .map_err(maybe_applied)
        } else {
            Ok(())
        };
        Ok(parsed
            .answers
            .into_iter()
            .zip(calls)
            .map(|(answer, call)| match &replicated {
                Err(e) if call.held.is_some() && answer.refused.is_none() => Err(e.clone()),
                _ => Ok(answer),
            })
            .collect())
    }
}

/// A `consume` reply's payload, read.
#[derive(Debug)]
struct Parsed {
    /// `-2` not paused, `-1` paused until resumed, else when consumers may try again.
    pause: i64,
    answers: Vec<Consumed>,
    promoted: Events,
}

/// Reads a `consume` reply's payload (see `consume.lua`) for `calls` calls.
fn parse_consume(
    topic: &str,
    payload: &[Value],
    calls: usize,
    what: &str,
) -> Result<Parsed, BackendError> {
    let bad = |detail: &str| BackendError::protocol(what, detail.to_owned());
    let num = |i: usize| payload.get(i).and_then(int);
    let pause = num(0).ok_or_else(|| bad("no pause"))?;
    if num(1) != i64::try_from(calls).ok() {
        return Err(bad("a count of calls other than the calls sent"));
    }
    let mut at = 2;
    let mut answers = Vec::with_capacity(calls);
    for _ in 0..calls {
        let (status, state) = (
            num(at).ok_or_else(|| bad("no status"))?,
            num(at + 1).ok_or_else(|| bad("no state"))?,
        );
        let n = num(at + 2)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad("no task count"))?;
        at += 3;
        let values = payload
            .get(at..at + n * POP_VALUES)
            .ok_or_else(|| bad("too few values"))?;
        at += n * POP_VALUES;
        let refused = match Status::from_codes(status, state) {
            Some(Status::Ok) => None,
            Some(refusal) => Some(refusal),
            None => return Err(bad("an unknown status")),
        };
        let tasks = parse_deliveries(topic, values)
            .ok_or_else(|| bad("a task with a bad field"))?
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        answers.push(Consumed { refused, tasks });
    }
    let promoted = Events::parse(&payload[at..]).ok_or_else(|| bad("bad promotions"))?;
    Ok(Parsed {
        pause,
        answers,
        promoted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn task(id: &str) -> Vec<Value> {
        vec![
            bulk(id),
            bulk("body"),
            bulk("0"),
            bulk("00000000000a0001"),
            bulk("1000"),
            bulk("30000"),
            Value::Int(7),
            bulk("0000000000000005"),
            bulk(""),
            bulk(""),
        ]
    }

    #[test]
    fn a_reply_gives_each_call_its_own_outcome() {
        let mut payload = vec![Value::Int(-2), Value::Int(3)];
        // A finish that was done, then popped two.
        payload.extend([Value::Int(0), Value::Int(0), Value::Int(2)]);
        payload.extend(task("a"));
        payload.extend(task("b"));
        // A finish refused: the task is DEAD (5); nothing popped.
        payload.extend([Value::Int(-2), Value::Int(5), Value::Int(0)]);
        // A pop alone that got one.
        payload.extend([Value::Int(0), Value::Int(0), Value::Int(1)]);
        payload.extend(task("c"));
        // One promotion, due at 990.
        payload.extend([Value::Int(1), Value::Int(990)]);
        let parsed = parse_consume("t", &payload, 3, "testing").unwrap();
        let ids: Vec<Vec<&str>> = parsed
            .answers
            .iter()
            .map(|a| a.tasks.iter().map(|d| d.id.as_str()).collect())
            .collect();
        assert_eq!(ids, vec![vec!["a", "b"], vec![], vec!["c"]]);
        let refused: Vec<Option<Status>> = parsed.answers.iter().map(|a| a.refused).collect();
        assert_eq!(refused, vec![None, Some(Status::WrongState(5)), None]);
        assert_eq!(
            (parsed.pause, parsed.promoted.dues.clone()),
            (-2, vec![990])
        );
        // Counts that do not add up are refused, not misread.
        assert!(parse_consume("t", &payload, 2, "testing").is_err());
        assert!(parse_consume("t", &payload[..payload.len() - 12], 3, "testing").is_err());
        payload[2] = Value::Int(-9);
        assert!(parse_consume("t", &payload, 3, "testing").is_err());
    }
}
