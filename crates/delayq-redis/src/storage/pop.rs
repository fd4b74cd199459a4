//! Popping: handing out READY tasks, earliest due first across the topic's partitions.
//!
//! With one partition, pop is one `pop` script. With more, it is best effort in two round
//! trips: one pipeline reads the first `max` READY (and due DELAYED) entries of every
//! partition, the `max` earliest of them make a plan of how many to take from which
//! partition, and one pipeline of `pop` scripts takes them (each script promotes what is due
//! in its partition first, so a lagging promoter never holds tasks back). When another
//! consumer was faster on a partition, the rest is taken from the other partitions that had
//! candidates, so no ready task is left behind while this consumer goes back to wait.
//!
//! Receipts are 12 random hex digits per pop script (from a per-instance seed and a counter
//! through splitmix64) followed by 4 the script appends per task.

use std::sync::atomic::{AtomicU64, Ordering};

use delayq::{Delivery, Millis, Result, State};
use delayq_core::hash::splitmix64;
use redis::{ScriptInvocation, Value};

use super::Shared;
use crate::error::BackendError;
use crate::keys::PartitionKeys;
use crate::scripts::{Reply, SCRIPTS, bytes, int, scored, text};

/// The source of receipt prefixes: random per instance, distinct per pop.
pub(super) struct Receipts {
    seed: u64,
    counter: AtomicU64,
}

impl Receipts {
    /// Receipts for an instance whose random seed is `seed`.
    pub fn new(seed: u64) -> Receipts {
        Receipts {
            seed,
            counter: AtomicU64::new(0),
        }
    }

    /// 12 hex digits, random per pop; the script appends 4 more per task.
    fn prefix(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{:012x}", splitmix64(self.seed ^ n) >> 16)
    }
}

/// What one partition's pop script did: the partition, how many were asked, what was taken.
type Taken = (u32, usize, Vec<Delivery>);

impl Shared {
    /// Takes up to `max` READY tasks of `topic`, earliest due first (best effort across
    /// partitions), finishing them at once with `auto_finish`.
    pub(super) async fn pop(
        &self,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        self.check_open()?;
        let Some(parts) = self.partitions(topic, false).await? else {
            return Ok(Vec::new());
        };
        let now = self.ctx.clock.now_ms();
        if parts == 1 {
            let got = self
                .pop_partitions(topic, &[(0, max)], auto_finish, now)
                .await?;
            return Ok(got.into_iter().flat_map(|(_, _, taken)| taken).collect());
        }
        let candidates = self.pop_candidates(topic, parts, max, now).await?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let mut plan: Vec<(u32, usize)> = Vec::new();
        for &(_, p) in candidates.iter().take(max) {
            match plan.iter_mut().find(|(q, _)| *q == p) {
                Some((_, n)) => *n += 1,
                None => plan.push((p, 1)),
            }
        }
        let mut got = Vec::new();
        let mut exhausted = Vec::new();
        for (p, wanted, taken) in self.pop_partitions(topic, &plan, auto_finish, now).await? {
            if taken.len() < wanted {
                exhausted.push(p);
            }
            got.extend(taken);
        }
        // Another consumer was faster on some partition: take the rest from the other
        // partitions that had candidates, best first.
        let mut others: Vec<u32> = Vec::new();
        for &(_, p) in &candidates {
            if !exhausted.contains(&p) && !others.contains(&p) {
                others.push(p);
            }
        }
        for p in others {
            if got.len() >= max {
                break;
            }
            let more = self
                .pop_partitions(topic, &[(p, max - got.len())], auto_finish, now)
                .await?;
            got.extend(more.into_iter().flat_map(|(_, _, taken)| taken));
        }
        got.sort_by_key(|d| d.due_ms);
        Ok(got)
    }

    /// The first `max` READY and due DELAYED entries of every partition, as (due,
    /// partition), earliest first.
    async fn pop_candidates(
        &self,
        topic: &str,
        parts: u32,
        max: usize,
        now: Millis,
    ) -> Result<Vec<(f64, u32)>, BackendError> {
        let what = format!("looking for ready tasks of topic {topic:?}");
        let mut pipe = redis::pipe();
        for p in 0..parts {
            let pk = self.keys.partition(topic, p);
            pipe.cmd("ZRANGE")
                .arg(pk.state_set(State::Ready))
                .arg(0)
                .arg(max.saturating_sub(1))
                .arg("WITHSCORES");
            pipe.cmd("ZRANGEBYSCORE")
                .arg(pk.state_set(State::Delayed))
                .arg("-inf")
                .arg(now)
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(max);
        }
        let heads: Vec<Value> = self
            .redis
            .io(&what, pipe.query_async(&mut self.redis.conn()))
            .await?;
        let mut candidates: Vec<(f64, u32)> = Vec::new();
        for (i, v) in heads.iter().enumerate() {
            let p = (i / 2) as u32;
            candidates.extend(scored(v).into_iter().map(|(_, due)| (due, p)));
        }
        candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        Ok(candidates)
    }

    /// Pops from one or more partitions in one pipeline: `(partition, count)` each. Returns,
    /// per partition that answered, what was asked and what was taken.
    async fn pop_partitions(
        &self,
        topic: &str,
        plan: &[(u32, usize)],
        auto_finish: bool,
        now: Millis,
    ) -> Result<Vec<Taken>, BackendError> {
        let what = format!("popping from topic {topic:?}");
        let keys: Vec<PartitionKeys> = plan
            .iter()
            .map(|&(p, _)| self.keys.partition(topic, p))
            .collect();
        let promote = self.options.promote_batch.to_string();
        let invs: Vec<ScriptInvocation<'_>> = plan
            .iter()
            .zip(&keys)
            .map(|(&(p, count), pk)| {
                let mut inv = self.invocation(&SCRIPTS.pop, pk, topic, p, now);
                inv.arg(count)
                    .arg(if auto_finish { "1" } else { "0" })
                    .arg(self.receipts.prefix())
                    .arg(&promote);
                inv
            })
            .collect();
        let mut out = Vec::new();
        let mut first_error = None;
        let results = self.redis.run_scripts(&what, &invs).await?;
        for (&(p, wanted), result) in plan.iter().zip(results) {
            let reply = match result.and_then(|v| Reply::parse(v, &what)) {
                Ok(reply) => reply,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            self.effects(topic, p, &reply);
            let (deliveries, promoted) = parse_pop(topic, &reply.payload, &what)?;
            for due in promoted {
                self.ctx.metrics.observe_fire(now.saturating_sub(due));
            }
            out.push((p, wanted, deliveries));
        }
        match first_error {
            // Tasks taken from other partitions are handed out; the failure shows next time.
            Some(e) if out.iter().all(|(_, _, taken)| taken.is_empty()) => Err(e),
            _ => Ok(out),
        }
    }
}

/// The deliveries of a pop reply, and the due times of the tasks it promoted.
fn parse_pop(
    topic: &str,
    payload: &[Value],
    what: &str,
) -> Result<(Vec<Delivery>, Vec<Millis>), BackendError> {
    let bad = |detail: &str| BackendError::protocol(what, detail.to_owned());
    let n = payload
        .first()
        .and_then(int)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| bad("no task count"))?;
    let tasks = payload
        .get(1..1 + n * 6)
        .ok_or_else(|| bad("too few values"))?;
    let deliveries = tasks
        .chunks_exact(6)
        .map(|t| {
            Some(Delivery {
                id: text(&t[0])?,
                topic: topic.to_owned(),
                body: bytes(&t[1])?,
                // TODO(issue 11): priority is not in the Redis record yet.
                priority: delayq::core::DEFAULT_PRIORITY,
                retries: u32::try_from(int(&t[2])?).ok()?,
                receipt: text(&t[3])?,
                due_ms: u64::try_from(int(&t[4])?).ok()?,
                ttr_ms: u64::try_from(int(&t[5])?).ok()?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("a task with a bad field"))?;
    let promoted = payload[1 + n * 6..]
        .iter()
        .filter_map(int)
        .filter_map(|d| u64::try_from(d).ok())
        .collect();
    Ok((deliveries, promoted))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn pop_replies_parse() {
        let payload = vec![
            Value::Int(1),
            bulk("id-1"),
            bulk("body"),
            bulk("2"),
            bulk("00000000000a0001"),
            bulk("1000"),
            bulk("30000"),
            Value::Int(990),
        ];
        let (d, promoted) = parse_pop("t", &payload, "testing").unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].id.as_str(), d[0].retries, d[0].due_ms),
            ("id-1", 2, 1_000)
        );
        assert_eq!(promoted, vec![990]);
        assert!(parse_pop("t", &[Value::Int(2)], "testing").is_err());
    }

    #[test]
    fn receipts_differ() {
        let receipts = Receipts::new(42);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1_000u64 {
            let prefix = receipts.prefix();
            assert_eq!(prefix.len(), 12);
            assert!(seen.insert(prefix));
        }
    }
}
