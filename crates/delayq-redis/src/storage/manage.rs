//! Topic-wide operations of the beanstalkd protocol: kick, pause and resume, peek, locate.
//!
//! - **kick** looks at the first DEAD tasks of every partition (the `peek` script); when the
//!   topic has any, it moves up to `max` of them, oldest buried first across partitions,
//!   else up to `max` DELAYED tasks not due yet, earliest due first. Each round plans how
//!   many to take from which partition and runs one `kick` script per partition; rounds
//!   repeat, [`KICK_CHUNK`] at a time, until `max` moved or nothing is left.
//! - **pause** is kept in every partition's `info` hash, so the pop script refuses to hand
//!   out in the same atomic step that would hand out. Pause and resume run one `pause`
//!   script per partition in one pipeline: a pop racing with them may still take from a
//!   partition not reached yet, and once they return every partition is paused (resumed).
//!   The end of a pause is judged by each script with the `now` it is given (the Redis
//!   reference clock's lower bound), so it passes by itself; a resume announces the topic's
//!   ready tasks on the events channel, waking consumers on every instance.
//! - **peek** asks every partition for its first task in the state's order and reads the
//!   best one.
//! - **locate** has no index: a task's partition within a topic follows from its id, so it
//!   is one `HGET` per registered topic, all in one pipeline (O(topics) commands, one round
//!   trip; in a cluster one request per slot). An index id → topics could not be kept
//!   atomically with the records in a cluster (other slots).

use std::collections::HashMap;

use delayq::{Error, FlowLimits, Millis, Result, State, TaskInfo};

use super::InstanceState;
use super::pop::Part;
use crate::error::{BackendError, maybe_applied};
use crate::keys::{PartitionKeys, partition_of};
use crate::record::Record;
use crate::scripts::{Reply, SCRIPTS, int};

/// Most tasks one round of kick moves.
const KICK_CHUNK: usize = 1_000;

impl InstanceState {
    /// beanstalkd's kick: up to `max` DEAD tasks → READY, or if there are none, up to `max`
    /// DELAYED tasks. Returns how many moved.
    pub(super) async fn kick(&self, topic: &str, max: u64) -> Result<u64> {
        self.check_open()?;
        let Some(n) = self.partitions(topic, false).await? else {
            return Ok(0);
        };
        let parts: Vec<Part<'_>> = (0..n).map(|p| (topic, p)).collect();
        let what = format!("kicking tasks of topic {topic:?}");
        let mut moved: u64 = 0;
        let mut from: Option<State> = None;
        while moved < max {
            let chunk = usize::try_from(max - moved)
                .unwrap_or(usize::MAX)
                .min(KICK_CHUNK);
            let now = self.ctx.clock.now_ms();
            let state = match from {
                Some(state) => state,
                None => *from.insert(self.kick_source(&parts, now).await?),
            };
            let heads = self.heads(&parts, state, chunk, now).await?;
            let mut candidates: Vec<([u64; 3], u32)> = Vec::new();
            for (p, h) in heads.into_iter().enumerate() {
                candidates.extend(h.entries.into_iter().map(|(key, _)| (key, p as u32)));
            }
            if candidates.is_empty() {
                break;
            }
            candidates.sort();
            let plan = kick_plan(&candidates, chunk);
            let round = self
                .kick_round(topic, &plan, state, now, &what, moved > 0)
                .await?;
            moved += round;
            if round == 0 || candidates.len() < chunk {
                break;
            }
        }
        Ok(moved)
    }

    /// What a kick moves: DEAD tasks when any partition has one, DELAYED ones otherwise.
    async fn kick_source(&self, parts: &[Part<'_>], now: Millis) -> Result<State> {
        let dead = self.heads(parts, State::Dead, 1, now).await?;
        Ok(if dead.iter().any(|h| !h.entries.is_empty()) {
            State::Dead
        } else {
            State::Delayed
        })
    }

    /// Runs one round of a kick: `plan` says how many tasks in `state` each partition moves.
    /// Returns how many moved. `after_some` says earlier rounds moved tasks already, so a
    /// failure of this one leaves the kick partly applied.
    async fn kick_round(
        &self,
        topic: &str,
        plan: &[(u32, usize)],
        state: State,
        now: Millis,
        what: &str,
        after_some: bool,
    ) -> Result<u64> {
        let keys: Vec<PartitionKeys> = plan
            .iter()
            .map(|&(p, _)| self.keys.partition(topic, p))
            .collect();
        let mode = if state == State::Dead { "5" } else { "0" };
        let invs: Vec<_> = plan
            .iter()
            .zip(&keys)
            .map(|(&(p, k), pk)| {
                let mut inv = self.invocation(&SCRIPTS.kick, pk, topic, p, now);
                inv.arg("").arg(mode).arg(k);
                inv
            })
            .collect();
        let mark = self.redis.mark();
        let results = self.redis.run_scripts(what, &invs).await.map_err(|e| {
            if after_some {
                maybe_applied(e)
            } else {
                Error::from(e)
            }
        })?;
        let mut round = 0;
        for (&(p, _), result) in plan.iter().zip(results) {
            let reply = result.and_then(|v| Reply::parse(v, what))?;
            self.effects(topic, p, &reply);
            round += reply.payload.first().and_then(int).unwrap_or(0).max(0) as u64;
        }
        self.redis
            .replicated(what, keys.iter().map(|pk| pk.base.as_str()), mark)
            .await
            .map_err(maybe_applied)?;
        Ok(round)
    }

    /// Pauses `topic` until `until_ms` (until resumed when `None`). A topic never added to
    /// is registered, so that its pause shows in stats and topics.
    pub(super) async fn pause(&self, topic: &str, until_ms: Option<Millis>) -> Result<()> {
        self.check_open()?;
        let n = self
            .partitions(topic, true)
            .await?
            .ok_or_else(|| BackendError::protocol("pausing", "topic not registered"))?;
        let until = until_ms.map_or_else(|| "-1".to_owned(), |u| u.to_string());
        self.on_every_partition(&SCRIPTS.pause, topic, n, &until, "pausing or resuming")
            .await
            .map(drop)
    }

    /// Ends the pause of `topic`.
    pub(super) async fn resume(&self, topic: &str) -> Result<()> {
        self.check_open()?;
        let Some(n) = self.partitions(topic, false).await? else {
            return Ok(());
        };
        self.on_every_partition(&SCRIPTS.pause, topic, n, "resume", "pausing or resuming")
            .await
            .map(drop)
    }

    /// Sets (or with `None` removes) the flow limits of `topic` in its partition, where the
    /// pop script checks them (docs/flow-control.md). A topic of several partitions keeps
    /// them in its permits (`permits.rs`) and marks them topic-wide in every partition:
    /// the permits are set first and forgotten last, so a partition never hands out by
    /// permits that do not know the limits; the tasks already ACTIVE when the limits are
    /// set get permits too, so that they count.
    pub(super) async fn set_limits(&self, topic: &str, limits: Option<FlowLimits>) -> Result<()> {
        self.check_open()?;
        let Some(n) = self.partitions(topic, limits.is_some()).await? else {
            return Ok(());
        };
        let doing = "setting flow limits of";
        let spec = limits.map(|l| limits_arg(&l)).unwrap_or_default();
        if n == 1 {
            return self
                .on_every_partition(&SCRIPTS.limits, topic, n, &spec, doing)
                .await
                .map(drop);
        }
        if spec.is_empty() {
            self.on_every_partition(&SCRIPTS.limits, topic, n, "", doing)
                .await?;
            return self
                .set_permit_limits(topic, "")
                .await
                .map_err(maybe_applied);
        }
        self.set_permit_limits(topic, &spec).await?;
        let replies = self
            .on_every_partition(&SCRIPTS.limits, topic, n, &format!("{spec},g"), doing)
            .await?;
        for reply in replies {
            for (receipt, key, deadline) in active_tasks(&reply.payload, doing)? {
                self.hold_permit(topic, &receipt, &key, deadline, true)
                    .await
                    .map_err(maybe_applied)?;
            }
        }
        Ok(())
    }

    /// Runs `script` with `arg` on every partition of `topic` (`doing` says what for errors);
    /// returns each partition's reply.
    async fn on_every_partition(
        &self,
        script: &crate::scripts::Script,
        topic: &str,
        n: u32,
        arg: &str,
        doing: &str,
    ) -> Result<Vec<Reply>> {
        let what = format!("{doing} topic {topic:?}");
        let now = self.ctx.clock.now_ms();
        let keys: Vec<PartitionKeys> = (0..n).map(|p| self.keys.partition(topic, p)).collect();
        let invs: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(p, pk)| {
                let mut inv = self.invocation(script, pk, topic, p as u32, now);
                inv.arg(arg);
                inv
            })
            .collect();
        // With several partitions, some may have been changed before one failed.
        let many = invs.len() > 1;
        let unknown = |e: BackendError| {
            if many {
                maybe_applied(e)
            } else {
                Error::from(e)
            }
        };
        let mark = self.redis.mark();
        let results = self
            .redis
            .run_scripts(&what, &invs)
            .await
            .map_err(unknown)?;
        let mut replies = Vec::with_capacity(results.len());
        for (p, result) in results.into_iter().enumerate() {
            let reply = result
                .and_then(|v| Reply::parse(v, &what))
                .map_err(unknown)?;
            self.effects(topic, p as u32, &reply);
            replies.push(reply);
        }
        self.redis
            .replicated(&what, keys.iter().map(|pk| pk.base.as_str()), mark)
            .await
            .map_err(maybe_applied)?;
        Ok(replies)
    }

    /// The next task of `topic` in `state` without taking it.
    pub(super) async fn peek(&self, topic: &str, state: State) -> Result<Option<TaskInfo>> {
        self.check_open()?;
        if !matches!(state, State::Ready | State::Delayed | State::Dead) {
            return Err(Error::invalid(
                "state",
                format!("is {state}, peek takes ready, delayed or dead"),
            ));
        }
        let Some(n) = self.partitions(topic, false).await? else {
            return Ok(None);
        };
        let parts: Vec<Part<'_>> = (0..n).map(|p| (topic, p)).collect();
        // A task taken or changed between the look and the read is looked for again.
        for _ in 0..3 {
            let now = self.ctx.clock.now_ms();
            let heads = self.heads(&parts, state, 1, now).await?;
            let best = heads
                .into_iter()
                .enumerate()
                .filter_map(|(p, h)| h.entries.into_iter().next().map(|e| (e.0, p, e.1)))
                .min();
            let Some((_, _, id)) = best else {
                return Ok(None);
            };
            match self.get(topic, &id).await {
                Ok(mut info) => {
                    // A due DELAYED task is READY; only the promoter has not moved it yet.
                    if state == State::Ready && info.state == State::Delayed && info.due_ms <= now {
                        info.state = State::Ready;
                    }
                    if info.state == state {
                        return Ok(Some(info));
                    }
                }
                Err(e) if e.kind() == delayq::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// The topics that hold a live record with this id, in name order.
    pub(super) async fn locate(&self, id: &str) -> Result<Vec<String>> {
        self.check_open()?;
        let what = format!("looking for task {id:?} in every topic");
        let mut hgetall = redis::cmd("HGETALL");
        hgetall.arg(self.keys.registry());
        let registry: HashMap<String, u32> = self
            .redis
            .io(&what, hgetall.query_async(&mut self.redis.conn()))
            .await?;
        let mut topics: Vec<(String, u32)> = registry.into_iter().collect();
        topics.sort();
        if topics.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (topic, n) in &topics {
            let pk = self.keys.partition(topic, partition_of(id, *n));
            pipe.cmd("HGET").arg(pk.records()).arg(id);
        }
        let found: Vec<Option<Vec<u8>>> = self
            .redis
            .io(&what, pipe.query_async(&mut self.redis.conn()))
            .await?;
        let now = self.ctx.clock.now_ms();
        Ok(topics
            .into_iter()
            .zip(found)
            .filter_map(|((topic, _), raw)| {
                let record = Record::parse(raw?)?;
                (!record.is_expired(now)).then_some(topic)
            })
            .collect())
    }
}

/// How many of the first `chunk` candidates (sorted, each with its partition) each partition
/// holds, partitions in the order they first appear.
fn kick_plan(candidates: &[([u64; 3], u32)], chunk: usize) -> Vec<(u32, usize)> {
    let mut plan: Vec<(u32, usize)> = Vec::new();
    for &(_, p) in candidates.iter().take(chunk) {
        match plan.iter_mut().find(|(q, _)| *q == p) {
            Some((_, k)) => *k += 1,
            None => plan.push((p, 1)),
        }
    }
    plan
}

/// The ACTIVE tasks a `limits` script lists when it marks a partition's limits topic-wide:
/// (receipt, key or `""`, ttr deadline) each.
fn active_tasks(payload: &[redis::Value], doing: &str) -> Result<Vec<(String, String, Millis)>> {
    use crate::scripts::text;
    let bad = || Error::from(BackendError::protocol(doing, "a bad list of ACTIVE tasks"));
    let Some(n) = payload.first().and_then(int) else {
        return Ok(Vec::new());
    };
    let n = usize::try_from(n).map_err(|_| bad())?;
    payload
        .get(1..1 + 3 * n)
        .ok_or_else(bad)?
        .chunks_exact(3)
        .map(|t| Some((text(&t[0])?, text(&t[1])?, u64::try_from(int(&t[2])?).ok()?)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)
}

/// The `limits` script's argument:
/// `<max_active>,<ms between hand-outs>,<burst>,<max_active_per_key>`, empty parts
/// for what is not limited (the interval in Rust's shortest exact form, which Lua reads back
/// to the same double).
fn limits_arg(l: &FlowLimits) -> String {
    let rate = l.rate();
    format!(
        "{},{},{},{}",
        l.max_active.map_or(String::new(), |n| n.to_string()),
        rate.map_or(String::new(), |r| r.interval_ms.to_string()),
        rate.map_or(String::new(), |r| r.burst.to_string()),
        l.max_active_per_key
            .map_or(String::new(), |n| n.to_string()),
    )
}
