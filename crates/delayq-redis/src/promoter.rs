//! The promoter: the time-driven work of the partitions this instance holds leases for.
//!
//! It keeps, for every held partition, the instant of its next timer (the earliest of: a
//! DELAYED task's due, an ACTIVE task's ttr deadline, the end of a retained record's
//! retention plus the tick's sweep slack, `RETENTION_SWEEP` in tick.lua), sleeps on the queue's clock until the earliest of them, and then runs the
//! `tick` script of every partition that came due, all in one pipeline. Each tick answers
//! with the partition's next timer, so an idle partition costs nothing until then. It is
//! woken early by [`Event::Wake`] when a script sets an earlier timer (this instance's own
//! operations directly, other instances' through the events channel), and it never polls.
//!
//! Which partitions are held follows from the leases ([`Event::Leases`], from
//! [`crate::lease`]) and the topic registry (read at start and after every reconnect of the
//! subscription, [`Event::Resync`], and extended by [`Event::Topic`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use delayq::Millis;
use tokio::sync::{mpsc, watch};

use crate::error::BackendError;
use crate::keys::bucket_of;
use crate::scripts::{Events, Reply, SCRIPTS, ScriptInvocation, Status, int};
use crate::storage::InstanceState;

/// What the promoter is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The buckets this instance now holds, with their fencing tokens.
    Leases(HashMap<u32, u64>),
    /// A topic and its partition count.
    Topic(String, u32),
    /// A partition has a timer at `at`, possibly earlier than the one known.
    Wake {
        topic: String,
        partition: u32,
        at: Millis,
    },
    /// Events may have been missed: reread the registry and look at every held partition.
    Resync,
}

/// Most partitions ticked in one pipeline.
const TICK_PIPELINE: usize = 64;

struct Promoter {
    state: Arc<InstanceState>,
    leases: HashMap<u32, u64>,
    topics: HashMap<String, u32>,
    /// Held partitions and their next timer (`Millis::MAX`: none).
    next: HashMap<(String, u32), Millis>,
    need_registry: bool,
}

/// Runs the promoter until `stop` turns true.
pub(crate) async fn run(
    state: Arc<InstanceState>,
    mut events: mpsc::UnboundedReceiver<Event>,
    mut stop: watch::Receiver<bool>,
) {
    let mut p = Promoter {
        state,
        leases: HashMap::new(),
        topics: HashMap::new(),
        next: HashMap::new(),
        need_registry: true,
    };
    let mut failures: u32 = 0;
    loop {
        if *stop.borrow() {
            return;
        }
        while let Ok(ev) = events.try_recv() {
            p.apply(ev);
        }
        let result = if p.need_registry {
            p.load_registry().await
        } else {
            let now = p.state.ctx.clock.now_ms();
            let due = p.due(now);
            if due.is_empty() {
                if !p.sleep(&mut events, &mut stop).await {
                    return;
                }
                continue;
            }
            let result = p.tick_all(&due, now).await;
            tokio::task::yield_now().await;
            result
        };
        match result {
            Ok(()) => failures = 0,
            Err(e) => {
                failures = failures.saturating_add(1);
                if !back_off(&e, failures, &mut stop).await {
                    return;
                }
            }
        }
    }
}

/// Waits after the `failures`-th failure in a row (50 ms doubling up to 2 s), logging the
/// first and every 50th. False when `stop` changed meanwhile.
async fn back_off(e: &BackendError, failures: u32, stop: &mut watch::Receiver<bool>) -> bool {
    if failures == 1 || failures.is_multiple_of(50) {
        tracing::warn!(error = %e, failures, "promotion failed; retrying");
    }
    let backoff = Duration::from_millis(50 << failures.min(5)).min(Duration::from_secs(2));
    tokio::select! {
        _ = stop.changed() => false,
        _ = tokio::time::sleep(backoff) => true,
    }
}

impl Promoter {
    /// The held partitions whose timer is at or before `now`.
    fn due(&self, now: Millis) -> Vec<(String, u32)> {
        self.next
            .iter()
            .filter(|&(_, &at)| at <= now)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Sleeps until the earliest timer, an event (applied) or `stop`. False when the
    /// promoter is to end (`stop` changed or the event channel closed).
    async fn sleep(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        let earliest = self
            .next
            .values()
            .copied()
            .min()
            .filter(|&at| at < Millis::MAX);
        let clock = Arc::clone(&self.state.ctx.clock);
        let sleep = async move {
            match earliest {
                Some(at) => clock.sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stop.changed() => false,
            ev = events.recv() => match ev {
                Some(ev) => {
                    self.apply(ev);
                    true
                }
                None => false,
            },
            _ = sleep => true,
        }
    }

    /// Ticks the `due` partitions, [`TICK_PIPELINE`] at a time, up to the first failure.
    async fn tick_all(&mut self, due: &[(String, u32)], now: Millis) -> Result<(), BackendError> {
        for chunk in due.chunks(TICK_PIPELINE) {
            self.tick(chunk, now).await?;
        }
        Ok(())
    }

    fn apply(&mut self, ev: Event) {
        match ev {
            Event::Leases(leases) => {
                if leases != self.leases {
                    self.leases = leases;
                    self.recompute();
                }
            }
            Event::Topic(topic, parts) => {
                if self.topics.insert(topic, parts) != Some(parts) {
                    self.recompute();
                }
            }
            Event::Wake {
                topic,
                partition,
                at,
            } => {
                if let Some(next) = self.next.get_mut(&(topic, partition)) {
                    *next = (*next).min(at);
                }
            }
            Event::Resync => {
                self.need_registry = true;
                for next in self.next.values_mut() {
                    *next = 0;
                }
            }
        }
    }

    /// Recomputes the held partitions; newly held ones are looked at at once.
    fn recompute(&mut self) {
        let mut next = HashMap::new();
        for (topic, &parts) in &self.topics {
            for p in 0..parts {
                if self.leases.contains_key(&bucket_of(topic, p)) {
                    let key = (topic.clone(), p);
                    let at = self.next.get(&key).copied().unwrap_or(0);
                    next.insert(key, at);
                }
            }
        }
        self.next = next;
    }

    async fn load_registry(&mut self) -> Result<(), BackendError> {
        let s = &self.state;
        let topics: HashMap<String, u32> = s
            .redis
            .io(
                "reading the topic registry",
                redis::cmd("HGETALL")
                    .arg(s.keys.registry())
                    .query_async(&mut s.redis.conn()),
            )
            .await?;
        // Events may have been missed: let parked consumers look again.
        for topic in topics.keys() {
            s.ctx.waiters.notify(topic, usize::MAX);
        }
        self.topics = topics;
        self.need_registry = false;
        self.recompute();
        for next in self.next.values_mut() {
            *next = 0;
        }
        Ok(())
    }

    /// Runs the tick script of each partition in `due`, in one pipeline.
    async fn tick(&mut self, due: &[(String, u32)], now: Millis) -> Result<(), BackendError> {
        let s = Arc::clone(&self.state);
        let what = "promoting due tasks";
        let batch = s.options.promote_batch.to_string();
        let keys: Vec<_> = due.iter().map(|(t, p)| s.keys.partition(t, *p)).collect();
        let mut invs: Vec<ScriptInvocation<'_>> = Vec::with_capacity(due.len());
        for ((topic, p), pk) in due.iter().zip(&keys) {
            let token = self.leases.get(&bucket_of(topic, *p)).copied().unwrap_or(0);
            let mut inv = s.invocation(&SCRIPTS.tick, pk, topic, *p, now);
            inv.key(pk.fence()).arg(token).arg(&batch);
            invs.push(inv);
        }
        let results = s.redis.run_scripts(what, &invs).await?;
        let mut failed = None;
        for ((topic, p), result) in due.iter().zip(results) {
            let reply = match result.and_then(|v| Reply::parse(v, what)) {
                Ok(reply) => reply,
                Err(e) => {
                    failed = Some(e);
                    continue;
                }
            };
            match reply.status {
                Status::Ok => {}
                Status::Fenced(newer) => {
                    tracing::info!(
                        topic,
                        partition = p,
                        newer,
                        "tick fenced off by a newer token"
                    );
                    let bucket = bucket_of(topic, *p);
                    s.fencing.report(newer, &[bucket]);
                    self.leases.remove(&bucket);
                    self.recompute();
                    continue;
                }
                other => {
                    failed = Some(BackendError::protocol(what, format!("{other:?}")));
                    continue;
                }
            }
            s.effects(topic, *p, &reply);
            // Tasks whose ttr ran out give their permits back (topic-wide limits); the permits'
            // own time would free them about now anyway.
            s.free_permits(topic, &reply.freed).await;
            let payload = &reply.payload;
            let next = payload.first().and_then(int).unwrap_or(-1);
            let more = payload.get(1).and_then(int).unwrap_or(0) == 1;
            let ttr_expired = payload.get(2).and_then(int).unwrap_or(0);
            if ttr_expired > 0 {
                let counters = s.ctx.metrics.topic(topic);
                for _ in 0..ttr_expired {
                    s.ctx.metrics.observe_ttr_expired(&counters);
                }
            }
            match payload.get(3..).and_then(Events::parse) {
                Some(events) => s.record_events(topic, &events, now),
                None => failed = Some(BackendError::protocol(what, "bad promotions")),
            }
            if let Some(slot) = self.next.get_mut(&(topic.clone(), *p)) {
                *slot = if more {
                    now
                } else {
                    u64::try_from(next).unwrap_or(Millis::MAX)
                };
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
