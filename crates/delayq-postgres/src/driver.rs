//! Time-driven work, run by every instance: promotion of due tasks, the expiry of tasks not
//! handed out, ttr expiry, the end of retentions, of pauses and of rate holds.
//!
//! Each tick ends by reading the earliest instant anything is due ([`NEXT_TIMER`]: the
//! first entry of each partial index, no scan), and the driver sleeps on the queue's clock
//! until then. It wakes early when this instance creates an earlier timer (an add, a pop's
//! ttr deadline, a pause with an end; [`Driver::wake_if_earlier`]) or when another
//! instance's transaction tells it so over LISTEN/NOTIFY (`delayq.add()` called from an
//! application's own transaction does); a slow look every [`IDLE_LOOK`] covers timers that
//! another instance created and then died before acting on. It never polls on a short
//! interval: an idle deployment costs each instance one transaction per [`IDLE_LOOK`].
//!
//! Every driver does the same work with `FOR UPDATE SKIP LOCKED`: instances that wake
//! together split the due rows between them, and each row's change is made once. One tick
//! is one transaction whose statements go out as one pipeline (at most [`PROMOTE_BATCH`]
//! rows of each kind; a full batch looks again at once). A pop promotes its topics' due
//! tasks itself only while the driver lags ([`Driver::lags`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use delayq::Result;
use delayq_core::{EXPIRED, Millis, State};
use tokio::sync::{Notify, watch};
use tokio_postgres::types::ToSql;

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

    /// Whether the driver is behind at `now`: asleep although something it knows of is due
    /// (its timer has not fired yet, or it waits out a failure). An awake driver is working
    /// through what is due, and one asleep until later knows of nothing due.
    pub fn lags(&self, now: Millis) -> bool {
        !self.awake.load(Ordering::SeqCst) && now >= self.armed.load(Ordering::SeqCst)
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
            Ok(Tick::Again) => continue,
            Ok(Tick::Sleep(next)) => Ok(next),
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

/// The earliest instant anything is due (`NULL`: nothing is). `ORDER BY … LIMIT 1` rather
/// than `min()`: a planner that misjudges a partial index as holding a row or two aggregates
/// over all of it.
const NEXT_TIMER: &str = "SELECT LEAST( \
       (SELECT due_ms FROM tasks WHERE state = 0 ORDER BY due_ms LIMIT 1), \
       (SELECT deadline_ms FROM tasks WHERE state IN (2, 3, 4) ORDER BY deadline_ms LIMIT 1), \
       (SELECT expires_at_ms FROM tasks WHERE state IN (0, 1) \
          AND expires_at_ms IS NOT NULL ORDER BY expires_at_ms LIMIT 1), \
       (SELECT min(pause_until_ms) FROM topics WHERE paused), \
       (SELECT min(rate_wake_ms) FROM topics))";

/// What the driver does after a tick.
enum Tick {
    /// Look again at once: a batch was full, or rows were changed after the next timer was
    /// read.
    Again,
    /// Sleep until this instant (`None`: nothing is due).
    Sleep(Option<Millis>),
}

/// One round of time-driven work at the clock's now, in one transaction: its statements
/// are sent together (tokio-postgres pipelines the queries of one connection polled at
/// once), so a tick costs one round trip to the database and its commit, whatever its
/// kinds of work; the next timer is read last in the same pipeline. On two busy cores a
/// round trip is the scheduler's latency twice, and ticks of six statements one after the
/// other were what made promotion milliseconds late.
async fn tick(inner: &Inner) -> Result<Tick> {
    let op = "applying due timers";
    inner
        .transact(op, async |tx, fx, now| {
            let promote = inner.promote_statement(tx, false).await?;
            let expiring = tx
                .prepare_cached(&format!(
                    "SELECT {T_COLUMNS} FROM tasks t WHERE state IN (0, 1) AND expires_at_ms <= $1 \
                 ORDER BY expires_at_ms LIMIT $2 FOR UPDATE SKIP LOCKED"
                ))
                .await?;
            let ttr = tx
                .prepare_cached(&format!(
                    "SELECT {T_COLUMNS}, (SELECT p.limits ?| array['max_active', 'max_active_per_key'] FROM topics p \
                 WHERE p.topic = t.topic) FROM tasks t WHERE state = 2 AND deadline_ms <= $1 \
                 ORDER BY deadline_ms LIMIT $2 FOR UPDATE OF t SKIP LOCKED"
                ))
                .await?;
            let retention = tx
                .prepare_cached(
                    // By the rows' ctids (a TID scan): `(topic, id) IN (…)` let the planner
                    // hash-join a scan of the whole table. The rows are locked, so their
                    // ctids hold until the statement deletes them. `ORDER BY`, so that the
                    // rows are read from the deadline index: with only a `LIMIT`, a planner
                    // that expects many ended retentions scans the table for them.
                    "DELETE FROM tasks WHERE ctid = ANY(ARRAY(SELECT ctid FROM tasks \
                 WHERE state IN (3, 4) AND deadline_ms <= $1 ORDER BY deadline_ms LIMIT $2 \
                 FOR UPDATE SKIP LOCKED))",
                )
                .await?;
            // Pauses that ended and rate holds that passed: their consumers may go on.
            let pauses = tx
                .prepare_cached(
                    "UPDATE topics SET paused = false, pause_until_ms = NULL \
                 WHERE paused AND pause_until_ms <= $1 RETURNING topic",
                )
                .await?;
            let rates = tx
                .prepare_cached(
                    "UPDATE topics SET rate_wake_ms = NULL WHERE rate_wake_ms <= $1 RETURNING topic",
                )
                .await?;
            let next_timer = tx.prepare_cached(NEXT_TIMER).await?;
            let at = db(now);
            let no_topics: Option<Vec<String>> = None;
            let all: [&(dyn ToSql + Sync); 3] = [&at, &PROMOTE_BATCH, &no_topics];
            let with_limit: [&(dyn ToSql + Sync); 2] = [&at, &PROMOTE_BATCH];
            let one: [&(dyn ToSql + Sync); 1] = [&at];
            let (promoted, expiring, ttr, ended, paused, rated, next) = tokio::try_join!(
                tx.query(&promote, &all),
                tx.query(&expiring, &with_limit),
                tx.query(&ttr, &with_limit),
                tx.execute(&retention, &with_limit),
                tx.query(&pauses, &one),
                tx.query(&rates, &one),
                tx.query_one(&next_timer, &[]),
            )?;
            let batch = PROMOTE_BATCH as usize;
            // DELAYED → READY.
            let mut full = promoted.len() >= batch;
            inner.promoted(promoted, fx);
            full |= expiring.len() >= batch || ttr.len() >= batch || ended >= batch as u64;
            // What is written below may make timers the next timer read above did not see.
            let again = !expiring.is_empty() || !ttr.is_empty();
            for row in paused.iter().chain(&rated) {
                fx.ready(row.get::<_, &str>(0));
            }

            // Expiry of tasks not handed out.
            for row in expiring {
                let mut task = Task::from_row(&row)?;
                inner.expire_row(tx, &mut task, now, fx).await?;
            }

            // ttr expiry: a failed attempt.
            let max_error = inner.ctx.limits.max_error_bytes;
            for row in ttr {
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

            fx.timer = None; // the driver read the next timer itself
            Ok(if full || again {
                Tick::Again
            } else {
                Tick::Sleep(next.get::<_, Option<i64>>(0).map(ms))
            })
        })
        .await
}

use crate::storage::save;

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::Driver;

    /// A pop promotes its topics' due tasks itself only while this says the driver lags; a
    /// driver at work or asleep until later leaves promotion to the driver.
    #[test]
    fn the_driver_lags_only_asleep_with_its_timer_due() {
        for (awake, armed, now, lags, why) in [
            (true, 0, 10, false, "at work: it reads the due rows itself"),
            (true, 5, 10, false, "at work, whatever it slept until"),
            (false, u64::MAX, 10, false, "asleep, nothing due"),
            (false, 11, 10, false, "asleep until later"),
            (
                false,
                10,
                10,
                true,
                "asleep, its timer due now and not fired yet",
            ),
            (false, 3, 10, true, "asleep, its timer overdue"),
            (false, 0, 10, true, "waiting out a failure (armed 0)"),
        ] {
            let driver = Driver::default();
            driver.awake.store(awake, Ordering::SeqCst);
            driver.armed.store(armed, Ordering::SeqCst);
            assert_eq!(driver.lags(now), lags, "{why}");
        }
    }
}
