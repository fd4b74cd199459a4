//! Time-driven work, run by every instance: promotion of due tasks, the expiry of tasks not
//! handed out, ttr expiry, the end of retentions, of pauses and of rate holds.
//!
//! Each tick ends by reading the earliest instant anything is due ([`NEXT_TIMER`]: the
//! first entry of each partial index, no scan), and the driver sleeps on the queue's clock
//! until then. It wakes early when this instance creates an earlier timer (an add, a pop's
//! ttr deadline, a pause with an end; [`Driver::wake_if_earlier`]) or when another
//! transaction tells it so over LISTEN/NOTIFY (`delayq.add()` called from an application's
//! own transaction does, and so does a follower's for the lead); a slow look every [`IDLE_LOOK`] covers timers that
//! another instance created and then died before acting on. It never polls on a short
//! interval: an idle deployment costs each instance one transaction per [`IDLE_LOOK`].
//!
//! Only one instance's driver ticks when a timer is due: the lead ([`crate::lead`]); the
//! others look [`FOLLOW_GRACE_MS`] later, in case the lead is stuck. Every driver does the
//! same work with `FOR UPDATE SKIP LOCKED`, so drivers that tick together split the due rows
//! between them, and each row's change is made once. One tick
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
use crate::lead::FOLLOW_GRACE_MS;
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
    /// Whether this instance leads ([`crate::lead`]): it ticks at its timers, not
    /// [`FOLLOW_GRACE_MS`] after them.
    leads: AtomicBool,
    /// The earliest timer it was told of since it last slept (`u64::MAX`: none). A follower
    /// sleeps on until that timer's grace instead of ticking at once.
    told: AtomicU64,
    /// Whether a wake-up asked for a tick whatever it leads ([`Driver::wake`]).
    look: AtomicBool,
}

impl Default for Driver {
    fn default() -> Self {
        Driver {
            notify: Notify::new(),
            armed: AtomicU64::new(u64::MAX),
            awake: AtomicBool::new(true),
            leads: AtomicBool::new(false),
            told: AtomicU64::new(u64::MAX),
            look: AtomicBool::new(false),
        }
    }
}

impl Driver {
    /// Wakes the driver if it would tick for `at` before what it sleeps until. While it
    /// works, the wake-up is kept for its next sleep (`Notify` stores one permit), so a timer
    /// created while it reads the next one is never missed.
    pub fn wake_if_earlier(&self, at: Millis) {
        if self.awake.load(Ordering::SeqCst) || self.look_at(at) < self.armed.load(Ordering::SeqCst)
        {
            self.told.fetch_min(at, Ordering::SeqCst);
            self.notify.notify_one();
        }
    }

    /// When the driver ticks for a timer at `at`: then if it leads, [`FOLLOW_GRACE_MS`]
    /// later if it follows.
    fn look_at(&self, at: Millis) -> Millis {
        if self.leads() {
            at
        } else {
            at.saturating_add(FOLLOW_GRACE_MS)
        }
    }

    /// Records whether this instance leads ([`crate::lead`]).
    pub fn set_leads(&self, leads: bool) {
        self.leads.store(leads, Ordering::SeqCst);
    }

    /// Whether this instance leads ([`crate::lead`]).
    pub fn leads(&self) -> bool {
        self.leads.load(Ordering::SeqCst)
    }

    /// Whether the driver is behind at `now`: asleep although it meant to tick by now (its
    /// timer has not fired yet, or it waits out a failure). An awake driver is working
    /// through what is due, and one asleep until later knows of nothing due (a follower's
    /// sleep includes its grace: until then the lead promotes).
    pub fn lags(&self, now: Millis) -> bool {
        !self.awake.load(Ordering::SeqCst) && now >= self.armed.load(Ordering::SeqCst)
    }

    /// Wakes the driver for a tick now (also a follower's).
    pub fn wake(&self) {
        self.look.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// What a woken driver does, asleep until `until`: `None` to tick now, or the instant to
    /// sleep on until. A lead ticks at once: its wake-ups are timers due now or about to be. A
    /// follower told of an earlier timer only moves its sleep to that timer's grace; ticking
    /// at once would race the lead for rows coming due.
    fn woken(&self, until: Option<Millis>) -> Option<Millis> {
        let told = self.told.swap(u64::MAX, Ordering::SeqCst);
        if self.look.swap(false, Ordering::SeqCst) || self.leads() || told == u64::MAX {
            return None;
        }
        let at = self.look_at(told);
        Some(until.map_or(at, |u| u.min(at)))
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
        let mut until = next.map(|at| inner.driver.look_at(at));
        // Armed before it is marked asleep: a wake-up in between compares with this sleep.
        inner
            .driver
            .armed
            .store(until.unwrap_or(u64::MAX), Ordering::SeqCst);
        inner.driver.awake.store(false, Ordering::SeqCst);
        let idle = tokio::time::sleep(IDLE_LOOK);
        tokio::pin!(idle);
        loop {
            let sleep = match until {
                Some(at) => inner.ctx.clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                _ = sleep => break,
                _ = inner.driver.notify.notified() => match inner.driver.woken(until) {
                    None => break,
                    Some(at) => {
                        until = Some(at);
                        inner.driver.armed.store(at, Ordering::SeqCst);
                    }
                },
                _ = &mut idle => break,
                _ = stop.changed() => return,
            }
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

    /// A woken lead ticks; a woken follower ticks only when asked to look, and otherwise
    /// moves its sleep to the grace of the earliest timer it was told of.
    #[test]
    fn a_woken_follower_moves_its_sleep_and_a_lead_ticks() {
        use crate::lead::FOLLOW_GRACE_MS as G;
        for (leads, told, look, until, then, why) in [
            (
                true,
                Some(100),
                false,
                Some(500),
                None,
                "a lead ticks for a timer",
            ),
            (true, None, true, None, None, "a lead asked to look"),
            (
                false,
                None,
                true,
                Some(500),
                None,
                "a follower asked to look",
            ),
            (
                false,
                None,
                false,
                Some(500),
                None,
                "a follower woken for nothing told",
            ),
            (
                false,
                Some(100),
                false,
                Some(500),
                Some(100 + G),
                "an earlier timer: its grace",
            ),
            (
                false,
                Some(900),
                false,
                Some(500),
                Some(500),
                "a later one keeps the sleep",
            ),
            (
                false,
                Some(100),
                false,
                None,
                Some(100 + G),
                "asleep with nothing due",
            ),
            (
                false,
                Some(100),
                true,
                Some(500),
                None,
                "told and asked to look",
            ),
        ] {
            let driver = Driver::default();
            driver.set_leads(leads);
            driver.awake.store(false, Ordering::SeqCst);
            driver
                .armed
                .store(until.unwrap_or(u64::MAX), Ordering::SeqCst);
            if let Some(at) = told {
                driver.told.store(at, Ordering::SeqCst);
            }
            if look {
                driver.wake();
            }
            assert_eq!(driver.woken(until), then, "{why}");
            assert_eq!(
                driver.told.load(Ordering::SeqCst),
                u64::MAX,
                "{why}: told is taken"
            );
            assert!(!driver.look.load(Ordering::SeqCst), "{why}: look is taken");
        }
    }
}
