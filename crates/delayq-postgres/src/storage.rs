//! The storage traits on PostgreSQL. Every transition is one transaction: the task's row is
//! read `FOR UPDATE`, the transition decided in Rust by [`crate::task`] (the engine's rules,
//! asked of `delayq_core::lifecycle`), the row written back, the wake-ups notified, and the
//! whole committed at once. Add, cancel and reschedule are the exception: they call the
//! schema's core SQL functions (`enqueue`, `cancel_task`, `reschedule_task`), the same ones
//! under the SQL API an application calls in its own transaction, so the two paths cannot
//! drift (a batch add calls `enqueue_batch`, held equal to `enqueue` once a task by a
//! test); the refusals are still `lifecycle`'s, and a table test holds the states the
//! functions change equal to `lifecycle::check_op`. Pops lock the READY rows they take with `FOR UPDATE SKIP LOCKED`,
//! so pops on any number of instances never wait for each other nor hand a task out twice;
//! a topic with flow limits is locked (its `topics` row) for the pop's transaction, so the
//! ACTIVE count and the rate's state read there are exact across instances ([`crate::pop`]).
//! Finishes, pops of one topic and acks-and-next of one topic are the other exception:
//! concurrent ones share one transaction a round ([`crate::consume`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use deadpool_postgres::{Object, Pool, Transaction};
use delayq::storage::coalesce::ConsumerCall;
use delayq::storage::finish_then_pop_in_two_steps;
use delayq::{
    AddResult, BeanstalkOps, Error, Held, JobIds, Outcome, Result, SettingsStore, StorageContext,
    TaskStore,
};
use delayq_core::flow::take;
use delayq_core::lifecycle::{self, Op, Refusal};
use delayq_core::{
    AddOutcome, BuryOptions, Delivery, EXPIRED, FlowLimits, HeldBack, Millis, OnDuplicate, Page,
    Pause, ReleaseOptions, State, TaskInfo, TaskSpec, TopicStats,
};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::consume::Consumers;
use crate::driver::Driver;
use crate::effects::{Effects, Fired, TimeDead};
use crate::error::{TxError, TxResult, pg, pool};
use crate::options::PostgresOptions;
use crate::pop::Want;
use crate::task::{COLUMNS, Expired, Failed, T_COLUMNS, Task, db, ms, state_of};

/// What the storage handle, the driver and the listener share.
pub(crate) struct Inner {
    pub ctx: StorageContext,
    pub pool: Pool,
    pub options: PostgresOptions,
    /// The LISTEN/NOTIFY channel.
    pub channel: String,
    /// This instance's id: notices it sent itself are skipped when they come back.
    pub instance: String,
    /// The local driver of time-driven work.
    pub driver: Driver,
    /// Consumers' calls waiting to share a transaction, by topic.
    pub consumers: Consumers,
    receipt_seed: u64,
    receipt_counter: AtomicU64,
    closed: AtomicBool,
}

/// What a transition does to the row it read.
enum Write {
    /// Write the row back.
    Save,
    /// Delete the row.
    Delete,
}

/// The SQL that writes a task's mutable columns back.
const SAVE: &str = "UPDATE tasks SET state = $3, priority = $4, due_ms = $5, deadline_ms = $6, \
     updated_at_ms = $7, receipt = $8, retries = $9, expires_at_ms = $10, on_expire = $11, \
     extra = $12 WHERE topic = $1 AND id = $2";

impl Inner {
    pub(crate) fn new(
        ctx: StorageContext,
        pool: Pool,
        options: PostgresOptions,
        instance: String,
        receipt_seed: u64,
    ) -> Inner {
        Inner {
            ctx,
            pool,
            channel: options.channel(),
            options,
            instance,
            driver: Driver::default(),
            consumers: Consumers::default(),
            receipt_seed,
            receipt_counter: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn now(&self) -> Millis {
        self.ctx.clock.now_ms()
    }

    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        Ok(())
    }

    pub(crate) async fn client(&self, op: &str) -> Result<Object> {
        self.check_open()?;
        self.pool.get().await.map_err(|e| pool(op, e))
    }

    /// A fresh receipt: 16 hex digits, well mixed, distinct across instances (random seed).
    pub(crate) fn receipt(&self) -> String {
        let n = self.receipt_counter.fetch_add(1, Ordering::Relaxed);
        let r = delayq_core::hash::splitmix64(self.receipt_seed.wrapping_add(n)).max(1);
        format!("{r:016x}")
    }

    /// Runs `work` in one transaction with the effects it collects: sends their notices
    /// inside it (delivered on commit), commits, then applies them locally. `work` gets the
    /// transaction, the effects and `now` (read once the transaction began).
    pub(crate) async fn transact<T>(
        &self,
        op: &str,
        work: impl AsyncFnOnce(&Transaction<'_>, &mut Effects, Millis) -> TxResult<T>,
    ) -> Result<T> {
        let mut client = self.client(op).await?;
        let (tx, effects, out, now) = async {
            let tx = client.transaction().await?;
            let now = self.now();
            let mut effects = Effects::default();
            let out = work(&tx, &mut effects, now).await?;
            effects.notify(self, &tx, now).await?;
            Ok::<_, TxError>((tx, effects, out, now))
        }
        .await
        .map_err(|e| e.into_error(op))?;
        tx.commit().await.map_err(|e| pg(op, Outcome::Unknown, e))?;
        effects.apply(self, now);
        Ok(out)
    }

    // ---- one task ---------------------------------------------------------------------

    /// Reads (topic, id) `FOR UPDATE` with its topic's limits, lets `decide` change it, and
    /// writes what it says, all in one transaction.
    async fn with_task<T>(
        &self,
        op: &str,
        topic: &str,
        id: &str,
        decide: impl FnOnce(&mut Task, &mut Effects, Option<FlowLimits>, Millis) -> Result<(T, Write)>,
    ) -> Result<T> {
        self.transact(op, async |tx, effects, now| {
            let sql = format!(
                "SELECT {T_COLUMNS}, (SELECT p.limits FROM topics p WHERE p.topic = t.topic) \
                 FROM tasks t WHERE t.topic = $1 AND t.id = $2 FOR UPDATE OF t"
            );
            let st = tx.prepare_cached(&sql).await?;
            let row = tx
                .query_opt(&st, &[&topic, &id])
                .await?
                .ok_or_else(|| Error::not_found(topic, id))?;
            let mut task = Task::from_row(&row)?;
            let limits = limits_of(row.try_get(19).ok().flatten());
            let was_active = task.state == State::Active;
            let (out, write) = decide(&mut task, effects, limits, now)?;
            match write {
                Write::Save => save(tx, &task).await?,
                Write::Delete => delete_row(tx, topic, id).await?,
            }
            let left_active = was_active
                && match write {
                    Write::Save => task.state != State::Active,
                    Write::Delete => true,
                };
            if left_active
                && limits.is_some_and(|l| l.max_active.is_some() || l.max_active_per_key.is_some())
            {
                // A slot freed: a consumer held back by max_active may go on.
                effects.ready(topic);
            }
            if effects.time_dead.iter().any(|d| d.reason == EXPIRED) {
                count_expired(tx, topic, 1).await?;
            }
            Ok(out)
        })
        .await
    }

    // ---- add --------------------------------------------------------------------------

    /// Adds tasks through the schema's SQL functions: `enqueue` for one task (the function
    /// under `delayq.add` too: one logic for the instance's add and the application's),
    /// `enqueue_batch` for more (migration 3: one statement a batch, with `enqueue`'s answers
    /// as if called once a task in order). The functions notify the topic's consumers on
    /// other instances; this instance wakes its own after the commit.
    async fn add(&self, specs: Vec<TaskSpec>) -> Result<Vec<AddResult>> {
        let op = "adding tasks";
        self.transact(op, async |tx, effects, now| {
            let tasks: Vec<(Task, i16)> = specs
                .into_iter()
                .map(|spec| {
                    let policy = match spec.on_duplicate {
                        OnDuplicate::Reject => 0,
                        OnDuplicate::Replace => 1,
                        OnDuplicate::Keep => 2,
                    };
                    (Task::new(spec, now), policy)
                })
                .collect();
            let mut answers = Vec::with_capacity(tasks.len());
            if let [(task, policy)] = tasks.as_slice() {
                // One task: the plain function is the shorter path.
                answers.push(enqueue(tx, &self.instance, now, task, *policy).await?);
            } else {
                for chunk in tasks.chunks(BATCH_STATEMENT) {
                    answers.extend(enqueue_batch(tx, &self.instance, now, chunk).await?);
                }
            }
            let mut results = Vec::with_capacity(tasks.len());
            for ((task, _), (outcome, new_state)) in tasks.into_iter().zip(answers) {
                let outcome = match outcome {
                    0 => AddOutcome::Added,
                    1 => AddOutcome::Replaced,
                    2 => {
                        results.push(Ok(AddOutcome::Existed));
                        continue;
                    }
                    _ => {
                        results.push(Err(Error::Duplicate {
                            topic: task.topic,
                            id: task.id,
                        }));
                        continue;
                    }
                };
                match state_of(new_state)? {
                    State::Ready => effects.notified(&task.topic),
                    _ => effects.timer(task.due_ms),
                }
                if let Some(at) = task.expires_at_ms {
                    effects.timer(at);
                }
                results.push(Ok(outcome));
            }
            Ok(results)
        })
        .await
    }

    /// Cancels through `cancel_task`, the SQL function under `delayq.cancel` too. It decides
    /// by the state it found; the refusal is [`lifecycle::check_op`]'s (a table test in
    /// `tests/pg_sql_api.rs` holds the two equal).
    async fn cancel(&self, topic: &str, id: &str) -> Result<()> {
        let retention = db(self.ctx.defaults.retention_ms);
        self.transact("cancelling a task", async |tx, effects, now| {
            let st = tx
                .prepare_cached("SELECT prior, woke FROM cancel_task($1, $2, $3, $4, $5)")
                .await?;
            let row = tx
                .query_one(&st, &[&db(now), &retention, &self.instance, &topic, &id])
                .await?;
            let prior = found(row.get(0), topic, id)?;
            lifecycle::check_op(prior, Op::Cancel)
                .map_err(|refusal| Error::conflict(topic, id, refusal))?;
            if row.get::<_, bool>(1) {
                // A slot freed: a consumer held back by max_active may go on.
                effects.notified(topic);
            }
            effects.timer(now.saturating_add(self.ctx.defaults.retention_ms));
            Ok(())
        })
        .await
    }

    /// Reschedules through `reschedule_task`, the SQL function under `delayq.reschedule` too.
    async fn reschedule(&self, topic: &str, id: &str, due_ms: Millis) -> Result<State> {
        self.transact("rescheduling a task", async |tx, effects, now| {
            let st = tx
                .prepare_cached(
                    "SELECT prior, new_state, expires_at FROM reschedule_task($1, $2, $3, $4, $5)",
                )
                .await?;
            let row = tx
                .query_one(&st, &[&db(now), &self.instance, &topic, &id, &db(due_ms)])
                .await?;
            let prior = found(row.get(0), topic, id)?;
            let refuse = |refusal| Error::conflict(topic, id, refusal);
            lifecycle::check_op(prior, Op::Reschedule).map_err(refuse)?;
            let expires: Option<i64> = row.get(2);
            lifecycle::check_due_before_expiry(due_ms, expires.map(ms)).map_err(refuse)?;
            let state = match row.get::<_, Option<i16>>(1) {
                Some(code) => state_of(code)?,
                None => {
                    return Err(crate::error::corrupt(format!(
                        "reschedule_task left {topic}/{id} ({prior:?}) unchanged where the \
                         rules allow the change"
                    ))
                    .into());
                }
            };
            match state {
                State::Ready => effects.notified(topic),
                _ => effects.timer(due_ms),
            }
            Ok(state)
        })
        .await
    }

    // ---- pop --------------------------------------------------------------------------

    /// Takes up to `max` READY tasks over `topics` in one order (rule 11), obeying pauses and
    /// flow limits, in one transaction of its own ([`Inner::take_ready`]). A pop of one topic
    /// goes through [`Inner::consume`] instead, sharing a transaction with the other consumer
    /// calls of its topic.
    pub(crate) async fn pop(
        &self,
        topics: &[String],
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        let mut topics: Vec<String> = topics.to_vec();
        topics.sort();
        topics.dedup();
        if max == 0 || topics.is_empty() {
            self.check_open()?;
            return Ok(Vec::new());
        }
        self.transact("popping tasks", async |tx, effects, now| {
            let want = Want { max, auto_finish };
            let mut got = self.take_ready(tx, &topics, &[want], now, effects).await?;
            Ok(got.pop().unwrap_or_default())
        })
        .await
    }

    /// Moves up to `limit` due DELAYED tasks (of `topics`, or of all) to READY, skipping rows
    /// other transactions hold. Tasks past their expiry are left to [`Inner::expire_due`].
    /// Returns how many moved.
    pub(crate) async fn promote(
        &self,
        tx: &Transaction<'_>,
        topics: Option<&[String]>,
        now: Millis,
        limit: i64,
        effects: &mut Effects,
    ) -> TxResult<usize> {
        let st = self.promote_statement(tx, topics.is_some()).await?;
        let list = topics.map(<[String]>::to_vec);
        let rows = tx.query(&st, &[&db(now), &limit, &list]).await?;
        Ok(self.promoted(rows, effects))
    }

    /// The statement of [`Inner::promote`], of some topics or of all: its parameters are
    /// `now`, the most rows, and the topics (`NULL` for all).
    pub(crate) async fn promote_statement(
        &self,
        tx: &Transaction<'_>,
        of_topics: bool,
    ) -> TxResult<Statement> {
        let filter = if of_topics {
            "topic = ANY($3) AND state = 0"
        } else {
            "state = 0 AND $3::text[] IS NULL"
        };
        // By the rows' ctids (a TID scan), as `write_states` does, so that no plan joins a
        // scan of the whole table; the rows are locked, so their ctids hold.
        let sql = format!(
            "UPDATE tasks SET state = 1, updated_at_ms = $1 WHERE ctid = ANY(ARRAY( \
             SELECT ctid FROM tasks WHERE {filter} AND due_ms <= $1 \
             AND (expires_at_ms IS NULL OR expires_at_ms > $1) ORDER BY due_ms LIMIT $2 \
             FOR UPDATE SKIP LOCKED)) \
             RETURNING topic, id, due_ms, trace"
        );
        Ok(tx.prepare_cached(&sql).await?)
    }

    /// The effects of the rows [`Inner::promote_statement`] returned: how many moved.
    pub(crate) fn promoted(&self, rows: Vec<Row>, effects: &mut Effects) -> usize {
        let n = rows.len();
        for row in rows {
            let topic: String = row.get(0);
            let trace: Option<serde_json::Value> = row.get(3);
            effects.ready(&topic);
            effects.fired.push(Fired {
                topic,
                id: row.get(1),
                due_ms: ms(row.get(2)),
                trace: trace.and_then(|v| serde_json::from_value(v).ok()),
            });
        }
        n
    }

    /// Applies the expiry of a task the transaction holds: DEAD or deleted.
    pub(crate) async fn expire_row(
        &self,
        tx: &Transaction<'_>,
        task: &mut Task,
        now: Millis,
        effects: &mut Effects,
    ) -> TxResult<()> {
        let what = task.expire(now);
        write_expired(tx, task, what).await?;
        effects.time_dead.push(TimeDead {
            topic: task.topic.clone(),
            id: task.id.clone(),
            trace: task.trace.clone(),
            reason: EXPIRED,
            dead: what == Expired::Dead,
        });
        count_expired(tx, &task.topic, 1).await?;
        Ok(())
    }

    // ---- settings -----------------------------------------------------------------------

    async fn settings_change(
        &self,
        namespace: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64> {
        let op = "changing a setting";
        self.transact(op, async |tx, effects, _now| {
            let st = tx.prepare_cached(sql).await?;
            let n = tx.execute(&st, params).await?;
            if n > 0 {
                // A delete that removed nothing is no change.
                effects.settings.push(namespace.to_owned());
            }
            Ok(n)
        })
        .await
    }

    /// Runs the reads of `f` on a pooled connection (outside any transaction).
    pub(crate) async fn read<T>(
        &self,
        op: &str,
        f: impl AsyncFnOnce(&Object) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        let client = self.client(op).await?;
        f(&client).await.map_err(|e| pg(op, Outcome::NotApplied, e))
    }

    /// Stops new operations (they fail with [`Error::ShuttingDown`]).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }
}

/// Most tasks in one `enqueue_batch` statement: a larger batch takes a few, in order (the
/// default batch limit, 10 000 tasks, is one).
const BATCH_STATEMENT: usize = 10_000;

/// `enqueue` of one task: its outcome code and new state code.
async fn enqueue(
    tx: &Transaction<'_>,
    sender: &str,
    now: Millis,
    task: &Task,
    policy: i16,
) -> TxResult<(i16, i16)> {
    let st = tx
        .prepare_cached(
            "SELECT outcome, new_state FROM enqueue($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, \
             $11, $12, $13, $14, $15, $16)",
        )
        .await?;
    let row = tx
        .query_one(
            &st,
            &[
                &db(now),
                &sender,
                &policy,
                &task.topic,
                &task.id,
                &task.body,
                &i64::from(task.priority),
                &db(task.due_ms),
                &db(task.created_at_ms),
                &db(task.ttr_ms),
                &task.max_retries_db(),
                &task.expires_at_ms.map(db),
                &task.on_expire_code(),
                &task.key,
                &task.trace_json(),
                &task.extra_json(),
            ],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// `enqueue_batch` of `tasks` (each with its duplicate policy code): their outcome and new
/// state codes, in order.
async fn enqueue_batch(
    tx: &Transaction<'_>,
    sender: &str,
    now: Millis,
    tasks: &[(Task, i16)],
) -> TxResult<Vec<(i16, i16)>> {
    let st = tx
        .prepare_cached(
            "SELECT outcomes, new_states FROM enqueue_batch($1, $2, $3, $4, $5, $6, $7, $8, \
             $9, $10, $11, $12, $13, $14, $15, $16)",
        )
        .await?;
    let column = |f: fn(&Task) -> i64| tasks.iter().map(|(t, _)| f(t)).collect::<Vec<i64>>();
    let policies: Vec<i16> = tasks.iter().map(|(_, p)| *p).collect();
    let topics: Vec<&str> = tasks.iter().map(|(t, _)| t.topic.as_str()).collect();
    let ids: Vec<&str> = tasks.iter().map(|(t, _)| t.id.as_str()).collect();
    let bodies: Vec<&[u8]> = tasks.iter().map(|(t, _)| t.body.as_slice()).collect();
    let priorities = column(|t| i64::from(t.priority));
    let dues = column(|t| db(t.due_ms));
    let created = column(|t| db(t.created_at_ms));
    let ttrs = column(|t| db(t.ttr_ms));
    let max_retries = column(Task::max_retries_db);
    let expires: Vec<Option<i64>> = tasks.iter().map(|(t, _)| t.expires_at_ms.map(db)).collect();
    let on_expire: Vec<i16> = tasks.iter().map(|(t, _)| t.on_expire_code()).collect();
    let keys: Vec<Option<&str>> = tasks.iter().map(|(t, _)| t.key.as_deref()).collect();
    let traces: Vec<_> = tasks.iter().map(|(t, _)| t.trace_json()).collect();
    let extras: Vec<_> = tasks.iter().map(|(t, _)| t.extra_json()).collect();
    let row = tx
        .query_one(
            &st,
            &[
                &db(now),
                &sender,
                &policies,
                &topics,
                &ids,
                &bodies,
                &priorities,
                &dues,
                &created,
                &ttrs,
                &max_retries,
                &expires,
                &on_expire,
                &keys,
                &traces,
                &extras,
            ],
        )
        .await?;
    let (outcomes, states): (Vec<i16>, Vec<i16>) = (row.get(0), row.get(1));
    if outcomes.len() != tasks.len() || states.len() != tasks.len() {
        return Err(crate::error::corrupt(format!(
            "enqueue_batch answered {} outcomes and {} states for {} tasks",
            outcomes.len(),
            states.len(),
            tasks.len()
        ))
        .into());
    }
    Ok(outcomes.into_iter().zip(states).collect())
}

/// The state a core SQL function found the task in, or not-found for its `-1`.
fn found(code: i16, topic: &str, id: &str) -> Result<State> {
    if code < 0 {
        return Err(Error::not_found(topic, id));
    }
    state_of(code)
}

/// How many due tasks one promotion statement moves.
pub(crate) const PROMOTE_BATCH: i64 = 1_000;

/// A topic's row.
#[derive(Debug, Clone)]
pub(crate) struct TopicRow {
    pub topic: String,
    pub paused: bool,
    pub pause_until_ms: Option<Millis>,
    pub limits: Option<FlowLimits>,
    pub tat: f64,
}

impl TopicRow {
    pub(crate) fn from_row(row: &Row) -> Result<TopicRow> {
        let get = |e: tokio_postgres::Error| crate::error::corrupt(e.to_string());
        Ok(TopicRow {
            topic: row.try_get(0).map_err(get)?,
            paused: row.try_get(1).map_err(get)?,
            pause_until_ms: row.try_get::<_, Option<i64>>(2).map_err(get)?.map(ms),
            limits: limits_of(row.try_get(3).map_err(get)?),
            tat: row.try_get(4).map_err(get)?,
        })
    }

    pub(crate) fn pause(&self) -> Pause {
        Pause {
            paused: self.paused,
            until_ms: self.pause_until_ms,
        }
    }

    /// How many of `want` the limits let go at `now` with `active` tasks ACTIVE, and when the
    /// rate lets the next one go if it lets none (the engine's `Topic::allowance`).
    pub(crate) fn allowance(
        &self,
        now: Millis,
        want: usize,
        active: usize,
    ) -> (usize, Option<Millis>) {
        let Some(limits) = self.limits else {
            return (want, None);
        };
        let mut n = want;
        if let Some(max) = limits.max_active {
            n = n.min((max as usize).saturating_sub(active));
        }
        match limits.rate() {
            Some(rate) if n > 0 => {
                let got = take(rate, self.tat, now, n.min(u32::MAX as usize) as u32);
                (got.n as usize, got.next_at)
            }
            _ => (n, None),
        }
    }

    /// The READY tasks a pop could not take at `now` (the engine's `Topic::held_back`), given
    /// how many READY tasks belong to keys at their limit (`key_held`).
    fn held_back(&self, now: Millis, ready: u64, active: u64, key_held: u64) -> HeldBack {
        let mut held = HeldBack::default();
        let Some(limits) = self.limits else {
            return held;
        };
        if limits.max_active.is_some_and(|m| active >= u64::from(m)) {
            held.max_active = ready;
        } else if limits
            .rate()
            .is_some_and(|r| take(r, self.tat, now, 1).n == 0)
        {
            held.rate = ready;
        } else {
            held.key = key_held;
        }
        held
    }
}

pub(crate) fn limits_of(v: Option<serde_json::Value>) -> Option<FlowLimits> {
    let v = v?;
    match serde_json::from_value::<FlowLimits>(v) {
        Ok(l) if !l.is_empty() => Some(l),
        Ok(_) => None,
        Err(e) => {
            tracing::error!(error = %e, "stored flow limits do not parse; the topic has none until they are set again");
            None
        }
    }
}

pub(crate) async fn save(
    tx: &Transaction<'_>,
    task: &Task,
) -> std::result::Result<(), tokio_postgres::Error> {
    let st = tx.prepare_cached(SAVE).await?;
    tx.execute(
        &st,
        &[
            &task.topic,
            &task.id,
            &(task.state.code() as i16),
            &i64::from(task.priority),
            &db(task.due_ms),
            &db(task.deadline_ms),
            &db(task.updated_at_ms),
            &task.receipt,
            &(task.retries.min(i32::MAX as u32) as i32),
            &task.expires_at_ms.map(db),
            &task.on_expire_code(),
            &task.extra_json(),
        ],
    )
    .await?;
    Ok(())
}

async fn write_expired(
    tx: &Transaction<'_>,
    task: &Task,
    what: Expired,
) -> std::result::Result<(), tokio_postgres::Error> {
    match what {
        Expired::Dead => save(tx, task).await,
        Expired::Drop => delete_row(tx, &task.topic, &task.id).await,
    }
}

/// Deletes a task's row.
pub(crate) async fn delete_row(
    tx: &Transaction<'_>,
    topic: &str,
    id: &str,
) -> std::result::Result<(), tokio_postgres::Error> {
    let st = tx
        .prepare_cached("DELETE FROM tasks WHERE topic = $1 AND id = $2")
        .await?;
    tx.execute(&st, &[&topic, &id]).await?;
    Ok(())
}

/// Adds `n` to the topic's count of expired tasks (the `expired` of stats).
pub(crate) async fn count_expired(
    tx: &Transaction<'_>,
    topic: &str,
    n: i64,
) -> std::result::Result<(), tokio_postgres::Error> {
    let st = tx
        .prepare_cached(
            "INSERT INTO topics (topic, expired) VALUES ($1, $2) \
             ON CONFLICT (topic) DO UPDATE SET expired = topics.expired + EXCLUDED.expired",
        )
        .await?;
    tx.execute(&st, &[&topic, &n]).await?;
    Ok(())
}

/// The PostgreSQL backend. See the crate doc.
///
/// Dropping it without [`TaskStore::shutdown`] stops its background tasks at once, as a crash
/// would; the other instances go on with everything (no work belongs to one instance).
pub struct PostgresStorage {
    pub(crate) inner: Arc<Inner>,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for PostgresStorage {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.lock().drain(..) {
            t.abort();
        }
    }
}

impl std::fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStorage")
            .field("schema", &self.inner.options.schema)
            .field("instance", &self.inner.instance)
            .finish_non_exhaustive()
    }
}

impl PostgresStorage {
    /// The schema this instance uses.
    pub fn schema(&self) -> &str {
        &self.inner.options.schema
    }

    /// Whether this instance leads the time-driven work now: it holds the schema's driver
    /// lock and ticks when timers are due, while the other instances look a grace later.
    pub fn leads(&self) -> bool {
        self.inner.driver.leads()
    }

    async fn read<T>(
        &self,
        op: &str,
        f: impl AsyncFnOnce(&Object) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        self.inner.read(op, f).await
    }

    async fn stats_of(&self, topic: &str) -> Result<TopicStats> {
        let now = self.inner.now();
        let topic = topic.to_owned();
        let (counts, row) = self
            .read("reading a topic's counters", async |c| {
                let st = c
                    .prepare_cached(
                        "SELECT state, count(*), min(due_ms) FROM tasks WHERE topic = $1 \
                         GROUP BY state",
                    )
                    .await?;
                let counts = c.query(&st, &[&topic]).await?;
                let st = c
                    .prepare_cached(
                        "SELECT topic, paused, pause_until_ms, limits, tat, expired FROM topics \
                         WHERE topic = $1",
                    )
                    .await?;
                let row = c.query_opt(&st, &[&topic]).await?;
                Ok((counts, row))
            })
            .await?;
        let mut stats = TopicStats::default();
        for r in counts {
            let state = state_of(r.get(0))?;
            stats.adjust(state, r.get::<_, i64>(1));
            if state == State::Delayed {
                stats.next_due_ms = r.get::<_, Option<i64>>(2).map(ms);
            }
        }
        if let Some(row) = row {
            let t = TopicRow::from_row(&row)?;
            stats.pause = t.pause().at(now);
            stats.expired = ms(row.get(5));
            let key_held = self.key_held(&t).await?;
            stats.held_back = t.held_back(now, stats.ready, stats.active, key_held);
        }
        Ok(stats)
    }

    /// How many READY tasks of the topic belong to keys at their `max_active_per_key`.
    async fn key_held(&self, t: &TopicRow) -> Result<u64> {
        let Some(limit) = t.limits.and_then(|l| l.max_active_per_key) else {
            return Ok(0);
        };
        let topic = t.topic.clone();
        let n: i64 = self
            .read("counting tasks held back by their key", async |c| {
                let st = c
                    .prepare_cached(
                        "SELECT count(*) FROM tasks WHERE topic = $1 AND state = 1 AND key IN \
                         (SELECT key FROM tasks WHERE topic = $1 AND state = 2 \
                          AND key IS NOT NULL GROUP BY key HAVING count(*) >= $2)",
                    )
                    .await?;
                Ok(c.query_one(&st, &[&topic, &i64::from(limit)]).await?.get(0))
            })
            .await?;
        Ok(ms(n))
    }
}

#[async_trait]
impl TaskStore for PostgresStorage {
    async fn add(&self, tasks: Vec<TaskSpec>) -> Result<Vec<AddResult>> {
        self.inner.add(tasks).await
    }

    async fn pop(&self, topic: &str, max: usize, auto_finish: bool) -> Result<Vec<Delivery>> {
        if max == 0 {
            self.inner.check_open()?;
            return Ok(Vec::new());
        }
        let call = ConsumerCall::pop(max, auto_finish);
        self.inner.consume(topic, call).await
    }

    async fn pop_any(
        &self,
        topics: &[String],
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        self.inner.pop(topics, max, auto_finish).await
    }

    async fn finish(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<()> {
        let call = ConsumerCall::finish(id, receipt);
        self.inner.consume(topic, call).await.map(|_| ())
    }

    /// One call of a consumer round when the held task is of the popped topic (one
    /// transaction, shared with the topic's other consumer calls); else the finish, then the
    /// pop.
    async fn finish_then_pop(
        &self,
        held: Held<'_>,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> Result<Result<Vec<Delivery>>> {
        if held.topic != topic {
            return finish_then_pop_in_two_steps(self, held, topic, max, auto_finish).await;
        }
        let call = ConsumerCall::finish_then_pop(held.id, held.receipt, max, auto_finish);
        self.inner.consume(topic, call).await.map(Ok)
    }

    async fn release(&self, topic: &str, id: &str, options: ReleaseOptions) -> Result<State> {
        let max_error = self.inner.ctx.limits.max_error_bytes;
        let inner = &self.inner;
        self.inner
            .with_task("releasing a task", topic, id, |t, fx, _, now| {
                t.check(Op::Release, options.receipt.as_deref())?;
                if let Some(priority) = options.priority {
                    t.priority = priority;
                }
                let start = inner.ctx.clock.window_start(now);
                let failed = t.fail(
                    start,
                    options.delay_ms,
                    "released",
                    options.error,
                    max_error,
                );
                let write = after_failure(t, fx, failed);
                Ok((failed.state(), write))
            })
            .await
    }

    async fn touch(&self, topic: &str, id: &str, receipt: Option<&str>) -> Result<Millis> {
        self.inner
            .with_task("touching a task", topic, id, |t, fx, _, now| {
                t.check(Op::Touch, receipt)?;
                t.deadline_ms = self
                    .inner
                    .ctx
                    .clock
                    .window_start(now)
                    .saturating_add(t.ttr_ms);
                fx.timer(t.deadline_ms);
                Ok((t.deadline_ms, Write::Save))
            })
            .await
    }

    async fn cancel(&self, topic: &str, id: &str) -> Result<()> {
        self.inner.cancel(topic, id).await
    }

    async fn requeue(&self, topic: &str, id: &str) -> Result<()> {
        self.inner
            .with_task("requeueing a task", topic, id, |t, fx, _, now| {
                t.check(Op::Requeue, None)?;
                t.requeue(now);
                fx.ready(&t.topic);
                Ok(((), Write::Save))
            })
            .await
    }

    async fn requeue_all(&self, topic: &str) -> Result<u64> {
        let op = "requeueing dead tasks";
        let inner = &self.inner;
        inner
            .transact(op, async |tx, effects, now| {
                let st = tx
                .prepare_cached(
                    "UPDATE tasks SET state = 1, retries = 0, expires_at_ms = NULL, on_expire = 0, \
                     receipt = NULL, deadline_ms = 0, updated_at_ms = $2 \
                     WHERE topic = $1 AND state = 5",
                )
                .await?;
                let n = tx.execute(&st, &[&topic, &db(now)]).await?;
                if n > 0 {
                    effects.ready(topic);
                }
                Ok(n)
            })
            .await
    }

    async fn delete(&self, topic: &str, id: &str) -> Result<()> {
        self.inner
            .with_task("deleting a task", topic, id, |_, _, _, _| {
                Ok(((), Write::Delete))
            })
            .await
    }

    async fn bury(&self, topic: &str, id: &str, options: BuryOptions) -> Result<()> {
        let max_error = self.inner.ctx.limits.max_error_bytes;
        self.inner
            .with_task("burying a task", topic, id, |t, fx, _, now| {
                t.check(Op::Bury, options.receipt.as_deref())?;
                let mut error = options.error.unwrap_or_else(|| "buried".to_owned());
                delayq_core::validate::truncate_utf8(&mut error, max_error);
                if let Some(priority) = options.priority {
                    t.priority = priority;
                }
                t.push_failure(now, "buried", Some(error));
                let due = t.due_ms;
                t.enter(State::Dead, due, now, 0);
                fx.dead.push(t.topic.clone());
                Ok(((), Write::Save))
            })
            .await
    }

    async fn reschedule(&self, topic: &str, id: &str, due_ms: Millis) -> Result<State> {
        self.inner.reschedule(topic, id, due_ms).await
    }

    async fn pause(&self, topic: &str, until_ms: Option<Millis>) -> Result<()> {
        let op = "pausing a topic";
        let inner = &self.inner;
        inner
            .transact(op, async |tx, effects, _now| {
                let st = tx
                    .prepare_cached(
                        "INSERT INTO topics (topic, paused, pause_until_ms) VALUES ($1, true, $2) \
                     ON CONFLICT (topic) DO UPDATE SET paused = true, pause_until_ms = $2",
                    )
                    .await?;
                tx.execute(&st, &[&topic, &until_ms.map(db)]).await?;
                if let Some(at) = until_ms {
                    effects.timer(at);
                }
                Ok(())
            })
            .await
    }

    async fn resume(&self, topic: &str) -> Result<()> {
        let op = "resuming a topic";
        let inner = &self.inner;
        inner
            .transact(op, async |tx, effects, _now| {
                let st = tx
                    .prepare_cached(
                        "UPDATE topics SET paused = false, pause_until_ms = NULL WHERE topic = $1 \
                     AND paused",
                    )
                    .await?;
                let n = tx.execute(&st, &[&topic]).await?;
                if n > 0 {
                    effects.ready(topic);
                }
                Ok(())
            })
            .await
    }

    async fn set_limits(&self, topic: &str, limits: Option<FlowLimits>) -> Result<()> {
        let op = "setting a topic's limits";
        let inner = &self.inner;
        inner
            .transact(op, async |tx, effects, _now| {
                let json = limits
                    .map(|l| serde_json::to_value(l).map_err(|err| Error::storage(op, err)))
                    .transpose()?;
                let st = tx
                    .prepare_cached(
                        "INSERT INTO topics (topic, limits) VALUES ($1, $2) \
                     ON CONFLICT (topic) DO UPDATE SET limits = $2",
                    )
                    .await?;
                tx.execute(&st, &[&topic, &json]).await?;
                // Also under the settings store's `limits` namespace, like the other backends.
                match &json {
                    Some(v) => {
                        let st = tx
                            .prepare_cached(
                                "INSERT INTO settings (namespace, key, value) VALUES ($1, $2, $3) \
                             ON CONFLICT (namespace, key) DO UPDATE SET value = $3",
                            )
                            .await?;
                        let bytes = serde_json::to_vec(v).map_err(|err| Error::storage(op, err))?;
                        tx.execute(&st, &[&delayq::LIMITS_NAMESPACE, &topic, &bytes])
                            .await?;
                    }
                    None => {
                        let st = tx
                            .prepare_cached(
                                "DELETE FROM settings WHERE namespace = $1 AND key = $2",
                            )
                            .await?;
                        tx.execute(&st, &[&delayq::LIMITS_NAMESPACE, &topic])
                            .await?;
                    }
                }
                effects.ready(topic); // a raised limit may let a parked consumer go
                effects.settings.push(delayq::LIMITS_NAMESPACE.to_owned());
                Ok(())
            })
            .await
    }

    async fn limits(&self) -> Result<Vec<(String, FlowLimits)>> {
        let rows = self
            .read("reading flow limits", async |c| {
                let st = c
                    .prepare_cached(
                        "SELECT topic, limits FROM topics WHERE limits IS NOT NULL ORDER BY topic",
                    )
                    .await?;
                c.query(&st, &[]).await
            })
            .await?;
        Ok(rows
            .into_iter()
            .filter_map(|r| Some((r.get::<_, String>(0), limits_of(r.get(1))?)))
            .collect())
    }

    async fn get(&self, topic: &str, id: &str) -> Result<TaskInfo> {
        let (t, i) = (topic.to_owned(), id.to_owned());
        let row = self
            .read("reading a task", async |c| {
                let st = c
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM tasks WHERE topic = $1 AND id = $2"
                    ))
                    .await?;
                c.query_opt(&st, &[&t, &i]).await
            })
            .await?
            .ok_or_else(|| Error::not_found(topic, id))?;
        Ok(Task::from_row(&row)?.info())
    }

    async fn list(
        &self,
        topic: &str,
        state: Option<State>,
        page: u64,
        page_size: u64,
    ) -> Result<Page<TaskInfo>> {
        let skip = db(page.saturating_sub(1).saturating_mul(page_size));
        let take = db(page_size);
        let code: Option<i16> = state.map(|s| s.code() as i16);
        let t = topic.to_owned();
        let (rows, total) = self
            .read("listing tasks", async |c| {
                let st = c
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM tasks WHERE topic = $1 \
                         AND ($2::smallint IS NULL OR state = $2) \
                         ORDER BY due_ms, seq OFFSET $3 LIMIT $4"
                    ))
                    .await?;
                let rows = c.query(&st, &[&t, &code, &skip, &take]).await?;
                let st = c
                    .prepare_cached(
                        "SELECT count(*) FROM tasks WHERE topic = $1 \
                         AND ($2::smallint IS NULL OR state = $2)",
                    )
                    .await?;
                let total: i64 = c.query_one(&st, &[&t, &code]).await?.get(0);
                Ok((rows, total))
            })
            .await?;
        let items = rows
            .iter()
            .map(|r| Task::from_row(r).map(Task::info))
            .collect::<Result<Vec<_>>>()?;
        Ok(Page {
            items,
            total: ms(total),
            page,
            page_size,
        })
    }

    async fn stats(&self, topic: &str) -> Result<TopicStats> {
        self.stats_of(topic).await
    }

    async fn topics(&self) -> Result<Vec<(String, TopicStats)>> {
        let now = self.inner.now();
        let (counts, rows) = self
            .read("listing topics", async |c| {
                let st = c
                    .prepare_cached(
                        "SELECT topic, state, count(*), min(due_ms) FROM tasks \
                         GROUP BY topic, state",
                    )
                    .await?;
                let counts = c.query(&st, &[]).await?;
                let st = c
                    .prepare_cached(
                        "SELECT topic, paused, pause_until_ms, limits, tat, expired FROM topics",
                    )
                    .await?;
                Ok((counts, c.query(&st, &[]).await?))
            })
            .await?;
        let mut out: BTreeMap<String, TopicStats> = BTreeMap::new();
        for r in counts {
            let stats = out.entry(r.get(0)).or_default();
            let state = state_of(r.get(1))?;
            stats.adjust(state, r.get::<_, i64>(2));
            if state == State::Delayed {
                stats.next_due_ms = r.get::<_, Option<i64>>(3).map(ms);
            }
        }
        for row in rows {
            let t = TopicRow::from_row(&row)?;
            let pause = t.pause().at(now);
            let listed = out.contains_key(&t.topic);
            if !listed && !pause.paused {
                continue;
            }
            let stats = out.entry(t.topic.clone()).or_default();
            stats.pause = pause;
            stats.expired = ms(row.get(5));
            let key_held = self.key_held(&t).await?;
            stats.held_back = t.held_back(now, stats.ready, stats.active, key_held);
        }
        Ok(out.into_iter().collect())
    }

    async fn due_counts(&self, topic: &str, bounds: &[Millis]) -> Result<Vec<u64>> {
        if bounds.len() < 2 {
            return Ok(Vec::new());
        }
        let lo: Vec<i64> = bounds[..bounds.len() - 1].iter().map(|&b| db(b)).collect();
        let hi: Vec<i64> = bounds[1..].iter().map(|&b| db(b)).collect();
        let t = topic.to_owned();
        let rows = self
            .read("counting due tasks", async |c| {
                let st = c
                    .prepare_cached(
                        "SELECT (SELECT count(*) FROM tasks WHERE topic = $1 AND state = 0 \
                         AND due_ms >= r.lo AND due_ms < r.hi) \
                         FROM unnest($2::bigint[], $3::bigint[]) WITH ORDINALITY AS r(lo, hi, i) \
                         ORDER BY r.i",
                    )
                    .await?;
                c.query(&st, &[&t, &lo, &hi]).await
            })
            .await?;
        Ok(rows.into_iter().map(|r| ms(r.get(0))).collect())
    }

    fn instance(&self) -> Option<String> {
        Some(self.inner.instance.clone())
    }

    async fn check_ready(&self) -> Result<()> {
        self.read("checking the database", async |c| {
            c.simple_query("SELECT 1").await.map(|_| ())
        })
        .await
    }

    async fn shutdown(&self) -> Result<()> {
        self.inner.close();
        let _ = self.stop.send(true);
        let tasks: Vec<JoinHandle<()>> = self.tasks.lock().drain(..).collect();
        for t in tasks {
            let _ = t.await;
        }
        self.inner.pool.close();
        Ok(())
    }
}

/// What a failed attempt writes, and what others must hear of.
fn after_failure(t: &Task, fx: &mut Effects, failed: Failed) -> Write {
    match failed {
        Failed::Again(State::Ready) => {
            fx.ready(&t.topic);
            Write::Save
        }
        Failed::Again(_) => {
            fx.timer(t.due_ms);
            Write::Save
        }
        Failed::Dead => {
            fx.dead.push(t.topic.clone());
            Write::Save
        }
        Failed::Expired(what) => {
            fx.time_dead.push(TimeDead {
                topic: t.topic.clone(),
                id: t.id.clone(),
                trace: t.trace.clone(),
                reason: EXPIRED,
                dead: what == Expired::Dead,
            });
            match what {
                Expired::Dead => Write::Save,
                Expired::Drop => Write::Delete,
            }
        }
    }
}

#[async_trait]
impl SettingsStore for PostgresStorage {
    async fn put(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<()> {
        self.inner
            .settings_change(
                namespace,
                "INSERT INTO settings (namespace, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (namespace, key) DO UPDATE SET value = $3",
                &[&namespace, &key, &value],
            )
            .await
            .map(|_| ())
    }

    async fn list(&self, namespace: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let ns = namespace.to_owned();
        let rows = self
            .read("reading settings", async |c| {
                let st = c
                    .prepare_cached(
                        "SELECT key, value FROM settings WHERE namespace = $1 ORDER BY key COLLATE \"C\"",
                    )
                    .await?;
                c.query(&st, &[&ns]).await
            })
            .await?;
        Ok(rows.into_iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn delete(&self, namespace: &str, key: &str) -> Result<bool> {
        self.inner
            .settings_change(
                namespace,
                "DELETE FROM settings WHERE namespace = $1 AND key = $2",
                &[&namespace, &key],
            )
            .await
            .map(|n| n > 0)
    }
}

#[async_trait]
impl JobIds for PostgresStorage {
    async fn next_id(&self) -> Result<u64> {
        let n: i64 = self
            .read("taking a job id", async |c| {
                let st = c.prepare_cached("SELECT nextval('job_ids')").await?;
                Ok(c.query_one(&st, &[]).await?.get(0))
            })
            .await?;
        Ok(ms(n))
    }
}

#[async_trait]
impl BeanstalkOps for PostgresStorage {
    async fn kick(&self, topic: &str, max: u64) -> Result<u64> {
        let op = "kicking tasks";
        let inner = &self.inner;
        inner
            .transact(op, async |tx, effects, now| {
                let limit = db(max);
                let dead = tx
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM tasks WHERE topic = $1 AND state = 5 \
                     ORDER BY updated_at_ms, seq LIMIT $2 FOR UPDATE"
                    ))
                    .await?;
                let mut rows = tx.query(&dead, &[&topic, &limit]).await?;
                let buried = !rows.is_empty();
                if !buried {
                    let delayed = tx
                        .prepare_cached(&format!(
                            "SELECT {COLUMNS} FROM tasks WHERE topic = $1 AND state = 0 \
                         ORDER BY due_ms, seq LIMIT $2 FOR UPDATE"
                        ))
                        .await?;
                    rows = tx.query(&delayed, &[&topic, &limit]).await?;
                }
                let n = rows.len() as u64;
                for row in rows {
                    let mut t = Task::from_row(&row)?;
                    if buried {
                        t.requeue(now);
                    } else {
                        t.enter(State::Ready, now, now, 0);
                    }
                    save(tx, &t).await?;
                }
                if n > 0 {
                    effects.ready(topic);
                }
                Ok(n)
            })
            .await
    }

    async fn kick_job(&self, topic: &str, id: &str) -> Result<()> {
        self.inner
            .with_task("kicking a task", topic, id, |t, fx, _, now| {
                t.check(Op::Kick, None)?;
                if t.state == State::Dead {
                    t.requeue(now);
                } else {
                    t.enter(State::Ready, now, now, 0);
                }
                fx.ready(&t.topic);
                Ok(((), Write::Save))
            })
            .await
    }

    async fn take(&self, topic: &str, id: &str) -> Result<Delivery> {
        let inner = &self.inner;
        let receipt = inner.receipt();
        self.inner
            .with_task("taking a task", topic, id, |t, fx, _, now| {
                t.check(Op::Take, None)?;
                if t.state != State::Dead && lifecycle::is_expired(t.expires_at_ms, now) {
                    // Too late to hand it out: it expires now, and the caller learns so.
                    let what = t.expire(now);
                    fx.time_dead.push(TimeDead {
                        topic: t.topic.clone(),
                        id: t.id.clone(),
                        trace: t.trace.clone(),
                        reason: EXPIRED,
                        dead: what == Expired::Dead,
                    });
                    let refused = Err(match what {
                        Expired::Drop => Error::not_found(&t.topic, &t.id),
                        Expired::Dead => Error::conflict(
                            &t.topic,
                            &t.id,
                            Refusal::WrongState {
                                state: State::Dead,
                                op: Op::Take,
                            },
                        ),
                    });
                    let write = match what {
                        Expired::Dead => Write::Save,
                        Expired::Drop => Write::Delete,
                    };
                    return Ok((refused, write));
                }
                match t.state {
                    State::Delayed => t.due_ms = now,
                    State::Dead => {
                        t.retries = 0;
                        t.expires_at_ms = None;
                        t.on_expire = delayq_core::OnExpire::Dead;
                    }
                    _ => {}
                }
                t.activate(receipt, now, self.inner.ctx.clock.window_start(now));
                fx.timer(t.deadline_ms);
                Ok((Ok(t.delivery()), Write::Save))
            })
            .await?
    }

    async fn peek(&self, topic: &str, state: State) -> Result<Option<TaskInfo>> {
        let order = match state {
            State::Ready => "priority, due_ms, seq",
            State::Dead => "updated_at_ms, seq",
            _ => "due_ms, seq",
        };
        let code = state.code() as i16;
        let t = topic.to_owned();
        let sql = format!(
            "SELECT {COLUMNS} FROM tasks WHERE topic = $1 AND state = $2 ORDER BY {order} LIMIT 1"
        );
        let row = self
            .read("peeking at a task", async |c| {
                let st = c.prepare_cached(&sql).await?;
                c.query_opt(&st, &[&t, &code]).await
            })
            .await?;
        row.map(|r| Task::from_row(&r).map(Task::info)).transpose()
    }

    async fn locate(&self, id: &str) -> Result<Vec<String>> {
        let i = id.to_owned();
        let rows = self
            .read("locating a task", async |c| {
                let st = c
                    .prepare_cached("SELECT DISTINCT topic FROM tasks WHERE id = $1 ORDER BY topic")
                    .await?;
                c.query(&st, &[&i]).await
            })
            .await?;
        Ok(rows.into_iter().map(|r| r.get(0)).collect())
    }
}
