//! What a transaction did that others must hear of: consumers to wake (here and on other
//! instances, by `NOTIFY` in the same transaction, so a rolled-back change wakes nobody), an
//! earlier timer for the local driver, and the counters and spans of fires, DEADs and
//! expiries, recorded only once the transaction committed.

use deadpool_postgres::Transaction;
use delayq_core::{EXPIRED, Millis, TraceContext};

use crate::error::TxResult;
use crate::storage::Inner;

/// A fire (DELAYED → READY) for the metrics and spans.
#[derive(Debug)]
pub(crate) struct Fired {
    pub topic: String,
    pub id: String,
    pub due_ms: Millis,
    pub trace: Option<TraceContext>,
}

/// A task that went DEAD or was dropped by time (ttr expiry, expiry).
#[derive(Debug)]
pub(crate) struct TimeDead {
    pub topic: String,
    pub id: String,
    pub trace: Option<TraceContext>,
    /// The span's reason: `ttr_expired` or `expired`.
    pub reason: &'static str,
    /// Whether the task went DEAD (an expiry with `on_expire: drop` deletes it).
    pub dead: bool,
}

/// The effects of one transaction. See the module doc.
#[derive(Debug, Default)]
pub(crate) struct Effects {
    /// Topics that got READY tasks (or a freed slot, or an ended pause): wake their consumers.
    pub ready: Vec<String>,
    /// The same, for topics whose other instances a core SQL function of the schema notified
    /// already (`enqueue`, `cancel_task`, `reschedule_task`): only this instance's consumers
    /// are left to wake.
    pub notified: Vec<String>,
    /// The earliest new timer (due, ttr deadline, end of a retention, pause or rate hold).
    pub timer: Option<Millis>,
    /// Promotions.
    pub fired: Vec<Fired>,
    /// Topics of tasks that went DEAD by a caller's act (release out of retries, bury).
    pub dead: Vec<String>,
    /// Tasks that time made DEAD or dropped.
    pub time_dead: Vec<TimeDead>,
    /// Topics of tasks whose ttr ran out.
    pub ttr_expired: Vec<String>,
    /// Settings namespaces that changed.
    pub settings: Vec<String>,
}

impl Effects {
    /// Notes that `topic` got ready tasks.
    pub fn ready(&mut self, topic: &str) {
        if !self.ready.iter().any(|t| t == topic) {
            self.ready.push(topic.to_owned());
        }
    }

    /// Notes that `topic` got ready tasks and that a SQL function notified the others.
    pub fn notified(&mut self, topic: &str) {
        if !self.notified.iter().any(|t| t == topic) {
            self.notified.push(topic.to_owned());
        }
    }

    /// Notes a timer at `at`.
    pub fn timer(&mut self, at: Millis) {
        self.timer = Some(self.timer.map_or(at, |t| t.min(at)));
    }

    /// Sends the notices to the other instances inside the transaction (delivered on commit),
    /// at `now`.
    ///
    /// A follower also tells of its earliest new timer ([`crate::lead`]): the lead does not
    /// know of it and might sleep past it. Not one the lead will see anyway: it reads the next
    /// timer at least once every [`IDLE_LOOK`](crate::IDLE_LOOK).
    pub async fn notify(&self, inner: &Inner, tx: &Transaction<'_>, now: Millis) -> TxResult<()> {
        let mut payloads: Vec<String> = Vec::new();
        for topic in &self.ready {
            payloads.push(format!("{}|r|{topic}", inner.instance));
        }
        if let Some(at) = self.timer {
            let seen_anyway = now.saturating_add(crate::IDLE_LOOK.as_millis() as u64);
            if at < seen_anyway && !inner.driver.leads() {
                payloads.push(format!("{}|t|{at}", inner.instance));
            }
        }
        for ns in &self.settings {
            payloads.push(format!("{}|s|{ns}", inner.instance));
        }
        if payloads.is_empty() {
            return Ok(());
        }
        let st = tx
            .prepare_cached("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p")
            .await?;
        tx.execute(&st, &[&inner.channel, &payloads]).await?;
        Ok(())
    }

    /// Applies the local effects once the transaction committed, at `now`.
    pub fn apply(self, inner: &Inner, now: Millis) {
        let ctx = &inner.ctx;
        let metrics = &ctx.metrics;
        for f in &self.fired {
            let counters = metrics.topic(&f.topic);
            metrics.observe_fire(&counters, now.saturating_sub(f.due_ms));
            metrics
                .spans()
                .fired(&f.topic, &f.id, f.trace.as_ref(), f.due_ms, now);
        }
        for topic in &self.ttr_expired {
            metrics.observe_ttr_expired(&metrics.topic(topic));
        }
        for topic in &self.dead {
            metrics.observe_dead(&metrics.topic(topic));
        }
        for d in &self.time_dead {
            let counters = metrics.topic(&d.topic);
            if d.reason == EXPIRED {
                metrics.observe_expired(&counters);
            }
            if d.dead {
                metrics.observe_dead(&counters);
            }
            metrics
                .spans()
                .dead(&d.topic, &d.id, d.trace.as_ref(), now, d.reason);
        }
        for topic in self.ready.iter().chain(&self.notified) {
            ctx.waiters.notify(topic, usize::MAX);
        }
        for ns in &self.settings {
            ctx.settings.notify(ns);
        }
        if let Some(at) = self.timer {
            inner.driver.wake_if_earlier(at);
        }
    }
}
