//! Time-driven work, run by every instance: promotion of due tasks, the expiry of tasks not
//! handed out, ttr expiry, the end of retentions, of pauses and of rate holds.
//!
//! Each instance's driver asks the database for the earliest instant anything is due
//! (`next_timer`: a `min` over partial indexes, no scan) and sleeps on the queue's clock
//! until then. It wakes early when this instance creates an earlier timer (an add, a pop's
//! ttr deadline, a pause with an end; [`Driver::wake_if_earlier`]) or when another
//! instance's transaction tells it so over LISTEN/NOTIFY (`delayq.add()` called from an
//! application's own transaction does); a slow look every [`IDLE_LOOK`] covers timers that
//! another instance created and then died before acting on. It never polls on a short
//! interval: an idle deployment costs each instance one query per [`IDLE_LOOK`].
//!
//! Every driver does the same work with `FOR UPDATE SKIP LOCKED`: instances that wake
//! together split the due rows between them, and each row's change is made once. One tick
//! is one transaction (at most [`PROMOTE_BATCH`] rows of each kind; a full batch looks again
//! at once).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use delayq::Result;
use delayq_core::{EXPIRED, Millis, State};
use tokio::sync::{Notify, watch};

use crate::effects::TimeDead;
use crate::storage::{Inner, PROMOTE_BATCH};
use crate::task::{Expired, Failed, T_COLUMNS, Task, db, ms};

/// How long a driver sleeps at most without being woken.
pub const IDLE_LOOK: Duration = Duration::from_secs(5);

/// The wake-up handle of the local driver.
#[derive(Debug)]
pub(crate) struct Driver {
    notify: Notify,
    /// The instant the driver sleeps until (`u64::MAX`: nothing is due).
    armed: AtomicU64,
    /// Whether the driver is working (it looks again before sleeping).
    awake: AtomicBool,
}

impl Default for Driver {
    fn default() -> Self {
        Driver {
            notify: Notify::new(),
            armed: AtomicU64::new(u64::MAX),
            awake: AtomicBool::new(true),
        }
    }
}

impl Driver {
    /// Wakes the driver if `at` is earlier than what it sleeps until. While it works, the
    /// wake-up is kept for its next sleep (`Notify` stores one permit), so a timer created
    /// while it reads the next one is never missed.
    pub fn wake_if_earlier(&self, at: Millis) {
        if self.awake.load(Ordering::SeqCst) || at < self.armed.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }

    /// Wakes the driver.
    pub fn wake(&self) {
        self.notify.notify_one();
    }
}

/// The driver's loop, until `stop`.
pub(crate) async fn run(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    let mut failures: u32 = 0;
    loop {
        if *stop.borrow() {
            return;
        }
        inner.driver.awake.store(true, Ordering::SeqCst);
        let next = match tick(&inner).await {
            Ok(true) => continue,
            Ok(false) => next_timer(&inner).await,
            Err(e) => Err(e),
        };
        let next = match next {
            Ok(next) => {
                failures = 0;
                next
            }
            Err(delayq::Error::ShuttingDown) => return,
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(error = %e, failures, "time-driven work failed; trying again");
                }
                let pause = Duration::from_millis(100u64 << failures.min(5));
                inner.driver.armed.store(0, Ordering::SeqCst);
                inner.driver.awake.store(false, Ordering::SeqCst);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.changed() => return,
                }
                continue;
            }
        };
        inner
            .driver
            .armed
            .store(next.unwrap_or(u64::MAX), Ordering::SeqCst);
        inner.driver.awake.store(false, Ordering::SeqCst);
        let sleep = match next {
            Some(at) => inner.ctx.clock.sleep_until(at),
            None => Box::pin(std::future::pending()),
        };
        tokio::select! {
            _ = sleep => {}
            _ = inner.driver.notify.notified() => {}
            _ = tokio::time::sleep(IDLE_LOOK) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The earliest instant anything is due, or `None`.
async fn next_timer(inner: &Inner) -> Result<Option<Millis>> {
    inner
        .read("reading the next timer", async |c| {
            let st = c
                .prepare_cached(
                    "SELECT LEAST( \
                       (SELECT min(due_ms) FROM tasks WHERE state = 0), \
                       (SELECT min(deadline_ms) FROM tasks WHERE state IN (2, 3, 4)), \
                       (SELECT min(expires_at_ms) FROM tasks WHERE state IN (0, 1) \
                          AND expires_at_ms IS NOT NULL), \
                       (SELECT min(pause_until_ms) FROM topics WHERE paused), \
                       (SELECT min(rate_wake_ms) FROM topics))",
                )
                .await?;
            let row = c.query_one(&st, &[]).await?;
            Ok(row.get::<_, Option<i64>>(0).map(ms))
        })
        .await
}

/// One round of time-driven work at the clock's now, in one transaction. Returns whether a batch was
/// full (more may be due at once).
async fn tick(inner: &Inner) -> Result<bool> {
    let op = "applying due timers";
    inner
        .transact(op, async |tx, fx, now| {
            let mut full = false;

            // DELAYED → READY.
            full |= inner.promote(tx, None, now, PROMOTE_BATCH, fx).await? as i64 >= PROMOTE_BATCH;

            // Expiry of tasks not handed out.
            let st = tx
                .prepare_cached(&format!(
                    "SELECT {T_COLUMNS} FROM tasks t WHERE state IN (0, 1) AND expires_at_ms <= $1 \
                 ORDER BY expires_at_ms LIMIT $2 FOR UPDATE SKIP LOCKED"
                ))
                .await?;
            let rows = tx.query(&st, &[&db(now), &PROMOTE_BATCH]).await?;
            full |= rows.len() as i64 >= PROMOTE_BATCH;
            for row in rows {
                let mut task = Task::from_row(&row)?;
                inner.expire_row(tx, &mut task, now, fx).await?;
            }

            // ttr expiry: a failed attempt.
            let st = tx
                .prepare_cached(&format!(
                    "SELECT {T_COLUMNS}, (SELECT p.limits ?| array['max_active', 'max_active_per_key'] FROM topics p \
                 WHERE p.topic = t.topic) FROM tasks t WHERE state = 2 AND deadline_ms <= $1 \
                 ORDER BY deadline_ms LIMIT $2 FOR UPDATE OF t SKIP LOCKED"
                ))
                .await?;
            let rows = tx.query(&st, &[&db(now), &PROMOTE_BATCH]).await?;
            full |= rows.len() as i64 >= PROMOTE_BATCH;
            let max_error = inner.ctx.limits.max_error_bytes;
            for row in rows {
                let mut task = Task::from_row(&row)?;
                let limited: Option<bool> = row.try_get(19).ok().flatten();
                fx.ttr_expired.push(task.topic.clone());
                let failed = task.fail(now, None, "ttr_expired", None, max_error);
                let (reason, dead) = match failed {
                    Failed::Again(State::Ready) => {
                        fx.ready(&task.topic);
                        (None, false)
                    }
                    Failed::Again(_) => {
                        fx.timer(task.due_ms);
                        (None, false)
                    }
                    Failed::Dead => (Some("ttr_expired"), true),
                    Failed::Expired(what) => (Some(EXPIRED), what == Expired::Dead),
                };
                if let Some(reason) = reason {
                    fx.time_dead.push(TimeDead {
                        topic: task.topic.clone(),
                        id: task.id.clone(),
                        trace: task.trace.clone(),
                        reason,
                        dead,
                    });
                }
                match failed {
                    Failed::Expired(Expired::Drop) => {
                        let st = tx
                            .prepare_cached("DELETE FROM tasks WHERE topic = $1 AND id = $2")
                            .await?;
                        tx.execute(&st, &[&task.topic, &task.id]).await?;
                    }
                    _ => save(tx, &task).await?,
                }
                if matches!(failed, Failed::Expired(_)) {
                    let st = tx
                        .prepare_cached(
                            "INSERT INTO topics (topic, expired) VALUES ($1, 1) \
                         ON CONFLICT (topic) DO UPDATE SET expired = topics.expired + 1",
                        )
                        .await?;
                    tx.execute(&st, &[&task.topic]).await?;
                }
                if limited == Some(true) {
                    fx.ready(&task.topic); // a slot freed
                }
            }

            // The end of retentions.
            let st = tx
                .prepare_cached(
                    "DELETE FROM tasks WHERE (topic, id) IN (SELECT topic, id FROM tasks \
                 WHERE state IN (3, 4) AND deadline_ms <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
                )
                .await?;
            full |= tx.execute(&st, &[&db(now), &PROMOTE_BATCH]).await? as i64 >= PROMOTE_BATCH;

            // Pauses that ended and rate holds that passed: their consumers may go on.
            let st = tx
                .prepare_cached(
                    "UPDATE topics SET paused = false, pause_until_ms = NULL \
                 WHERE paused AND pause_until_ms <= $1 RETURNING topic",
                )
                .await?;
            for row in tx.query(&st, &[&db(now)]).await? {
                fx.ready(row.get::<_, &str>(0));
            }
            let st = tx
            .prepare_cached(
                "UPDATE topics SET rate_wake_ms = NULL WHERE rate_wake_ms <= $1 RETURNING topic",
            )
            .await?;
            for row in tx.query(&st, &[&db(now)]).await? {
                fx.ready(row.get::<_, &str>(0));
            }
            fx.timer = None; // the driver reads the next timer itself
            Ok(full)
        })
        .await
}

use crate::storage::save;
