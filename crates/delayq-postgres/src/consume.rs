//! Consumers' calls on one topic, a round of them in one transaction: finish, pop, and both
//! (ack and take the next).
//!
//! A finish, a pop of one topic, and an ack-and-next whose held task is of the popped topic
//! join the topic's queue of consumer calls on this instance
//! ([`delayq::storage::coalesce`]); one transaction serves a round of them: first the
//! round's finishes in the order the calls came (their rows read `FOR UPDATE` with one
//! statement, in id order, so that two rounds lock them in the same order; each decided as
//! alone, against what the finishes before it left, so a task finished twice in a round is
//! refused the second time; the changed rows written with one statement), then its pops in
//! that order ([`Inner::take_ready`]): one order in which the concurrent calls could have
//! come. A refused finish (unknown task, wrong state, stale receipt) is its call's answer,
//! and that call pops nothing; the round goes on. So fifty consumers cost PostgreSQL one
//! commit, and one fsync, a round instead of fifty: one transaction a task was what bounded
//! pop + finish (about 540 tasks/s with fsync on, docs/performance.md).
//!
//! Every caller gets only its own outcome, and only once the round's transaction committed.
//! An error fails every call of its round: before the commit nothing of the round happened
//! (outcome not applied); a commit whose answer was lost leaves each call's outcome unknown,
//! as it does for one call alone. Wake-ups are as before: the round's notices (a freed slot
//! under `max_active`, promoted tasks) go out with its commit.

use std::collections::HashMap;
use std::sync::Arc;

use delayq::storage::coalesce::{Coalescer, ConsumerCall};
use delayq::{Delivery, Error, Result};
use delayq_core::State;
use delayq_core::lifecycle::Op;

use crate::pop::{Want, write_states};
use crate::storage::{Inner, limits_of};
use crate::task::{T_COLUMNS, Task};

/// Most tasks one round hands out: its rows stay locked until it commits.
const ROUND_TASKS: usize = 1_000;
/// Most calls one round serves.
const ROUND_CALLS: usize = 256;

/// The consumer calls waiting to share a transaction, by topic.
pub(crate) type Consumers = Coalescer<String, ConsumerCall, Vec<Delivery>>;

impl Inner {
    /// Serves `call` on `topic` in one transaction with the other consumer calls queued for
    /// the topic: the tasks it popped, or its finish's refusal (then it popped nothing).
    pub(crate) async fn consume(
        self: &Arc<Self>,
        topic: &str,
        call: ConsumerCall,
    ) -> Result<Vec<Delivery>> {
        let inner = Arc::clone(self);
        self.consumers
            .call(
                topic.to_owned(),
                call,
                "finishing and popping tasks",
                move |topic| {
                    tokio::spawn(inner.flush_consumers(topic));
                },
            )
            .await
    }

    /// Runs the queued consumer calls of `topic`, a transaction a round, until its queue is
    /// empty.
    async fn flush_consumers(self: Arc<Self>, topic: String) {
        let fits = || ConsumerCall::fits_round(ROUND_TASKS, ROUND_CALLS);
        let (this, topic) = (&self, &topic);
        self.consumers
            .serve(topic, fits, move |round| async move {
                this.consume_round(topic, &round).await
            })
            .await
    }

    /// One transaction for `calls` on `topic`: each call's answer, in order.
    async fn consume_round(
        &self,
        topic: &str,
        calls: &[ConsumerCall],
    ) -> Result<Vec<Result<Vec<Delivery>>>> {
        let op = ConsumerCall::describe(topic, calls, "transaction");
        let retention = self.ctx.defaults.retention_ms;
        self.transact(&op, async |tx, effects, now| {
            let mut answers: Vec<Result<Vec<Delivery>>> =
                calls.iter().map(|_| Ok(Vec::new())).collect();
            let mut held: Vec<&str> = calls
                .iter()
                .filter_map(|c| c.held.as_ref().map(|(id, _)| id.as_str()))
                .collect();
            // Sorted, so that two rounds lock their rows in the same order.
            held.sort_unstable();
            held.dedup();
            if !held.is_empty() {
                // One primary-key lookup an id, whatever the table's statistics say: with
                // `id = ANY($2)` a planner that misjudges the topic's size (a table that grew
                // since its last ANALYZE) scans the whole topic instead.
                let sql = format!(
                    "SELECT {T_COLUMNS}, (SELECT p.limits FROM topics p WHERE p.topic = t.topic) \
                     FROM unnest($2::text[]) AS u(id) CROSS JOIN LATERAL \
                     (SELECT * FROM tasks WHERE topic = $1 AND id = u.id LIMIT 1 FOR UPDATE) t"
                );
                let st = tx.prepare_cached(&sql).await?;
                let rows = tx.query(&st, &[&topic, &held]).await?;
                let limits = rows
                    .first()
                    .and_then(|r| limits_of(r.try_get(19).ok().flatten()));
                let mut tasks: HashMap<String, Task> = HashMap::with_capacity(rows.len());
                for row in &rows {
                    let task = Task::from_row(row)?;
                    tasks.insert(task.id.clone(), task);
                }
                let mut finished: Vec<&str> = Vec::new();
                for (call, answer) in calls.iter().zip(&mut answers) {
                    let Some((id, receipt)) = &call.held else {
                        continue;
                    };
                    let Some(task) = tasks.get_mut(id) else {
                        *answer = Err(Error::not_found(topic, id));
                        continue;
                    };
                    if let Err(refused) = task.check(Op::Finish, receipt.as_deref()) {
                        *answer = Err(refused);
                        continue;
                    }
                    let due = task.due_ms;
                    task.enter(State::Finished, due, now, retention);
                    effects.timer(task.deadline_ms);
                    finished.push(id);
                }
                if !finished.is_empty() {
                    let changed: Vec<Task> =
                        finished.iter().filter_map(|id| tasks.remove(*id)).collect();
                    write_states(tx, &changed, now).await?;
                    if limits
                        .is_some_and(|l| l.max_active.is_some() || l.max_active_per_key.is_some())
                    {
                        // A slot freed: a consumer held back by max_active may go on.
                        effects.ready(topic);
                    }
                }
            }
            // A call whose finish was refused pops nothing.
            let wants: Vec<Want> = calls
                .iter()
                .zip(&answers)
                .map(|(c, a)| Want {
                    max: if a.is_ok() { c.max } else { 0 },
                    auto_finish: c.auto_finish,
                })
                .collect();
            let topics = [topic.to_owned()];
            let got = self.take_ready(tx, &topics, &wants, now, effects).await?;
            for (answer, tasks) in answers.iter_mut().zip(got) {
                if let Ok(popped) = answer {
                    *popped = tasks;
                }
            }
            Ok(answers)
        })
        .await
    }
}
