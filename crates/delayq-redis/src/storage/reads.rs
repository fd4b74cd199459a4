//! Reads: one task, a page of a topic's tasks, a topic's counters, the list of topics.
//!
//! None of them writes. Counters come from the `stats` script of each partition (the sizes
//! of the state sets, less the retained records whose retention passed but are not purged
//! yet), so stats are O(partitions) and never scan. A page is cut from the merge of the
//! first `skip + page_size` entries of every (partition, state) set by due, then the chosen
//! records are read; a record removed or ended between the two reads is left out. Records
//! whose retention passed by the queue's clock read as absent.

use std::collections::HashMap;

use delayq::{Error, Millis, Page, Pause, Result, State, TaskInfo, TopicStats};
use futures_util::StreamExt;
use redis::Value;

use super::InstanceState;
use crate::error::BackendError;
use crate::keys::{PartitionKeys, dead_member, partition_of, ready_member};
use crate::record::{self, Record};
use crate::scripts::{SCRIPTS, ScriptInvocation, int, scored};

/// How many topics `topics()` reads at once.
const TOPICS_IN_FLIGHT: usize = 32;

impl InstanceState {
    /// The full view of one task.
    pub(super) async fn get(&self, topic: &str, id: &str) -> Result<TaskInfo> {
        self.check_open()?;
        let Some(parts) = self.partitions(topic, false).await? else {
            return Err(Error::not_found(topic, id));
        };
        let pk = self.keys.partition(topic, partition_of(id, parts));
        let what = format!("reading task {id:?} of topic {topic:?}");
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(pk.records()).arg(id);
        pipe.cmd("HGET").arg(pk.extras()).arg(id);
        let (raw, extras): (Option<Vec<u8>>, Option<String>) = self
            .redis
            .io(&what, pipe.query_async(&mut self.redis.conn()))
            .await?;
        let now = self.ctx.clock.now_ms();
        let Some(raw) = raw else {
            return Err(Error::not_found(topic, id));
        };
        let record = Record::parse(raw)
            .ok_or_else(|| BackendError::protocol(&what, format!("task {id:?}: bad record")))?;
        if record.is_expired(now) {
            return Err(Error::not_found(topic, id));
        }
        Ok(record::task_info(
            topic,
            id,
            record,
            extras.as_deref(),
            &what,
        )?)
    }

    /// A page of the tasks of `topic` (in `state`, or in any), by due.
    pub(super) async fn list(
        &self,
        topic: &str,
        state: Option<State>,
        page: u64,
        page_size: u64,
    ) -> Result<Page<TaskInfo>> {
        self.check_open()?;
        let mut out = Page {
            items: Vec::new(),
            total: 0,
            page,
            page_size,
        };
        let Some(parts) = self.partitions(topic, false).await? else {
            return Ok(out);
        };
        let now = self.ctx.clock.now_ms();
        let states: Vec<State> = match state {
            Some(st) => vec![st],
            None => State::ALL.to_vec(),
        };
        let stats = self.partition_stats(topic, parts, now).await?;
        out.total = states.iter().map(|&x| stats.count(x)).sum();
        let skip = page.saturating_sub(1).saturating_mul(page_size);
        if skip >= out.total {
            return Ok(out);
        }
        let what = format!("listing the tasks of topic {topic:?}");
        let chosen = self
            .page_ids(topic, parts, &states, skip, page_size, &what)
            .await?;
        let mut pipe = redis::pipe();
        for (p, id) in &chosen {
            let pk = self.keys.partition(topic, *p);
            pipe.cmd("HGET").arg(pk.records()).arg(id);
            pipe.cmd("HGET").arg(pk.extras()).arg(id);
        }
        let found: Vec<Option<Vec<u8>>> = self
            .redis
            .io(&what, pipe.query_async(&mut self.redis.conn()))
            .await?;
        for ((_, id), pair) in chosen.iter().zip(found.chunks_exact(2)) {
            // A record removed or ended between the two reads is left out.
            let Some(record) = pair[0].clone().and_then(Record::parse) else {
                continue;
            };
            if record.is_expired(now) {
                continue;
            }
            let extras = match &pair[1] {
                Some(raw) => Some(std::str::from_utf8(raw).map_err(|_| {
                    BackendError::protocol(&what, format!("task {id:?}: extras are not text"))
                })?),
                None => None,
            };
            let info = record::task_info(topic, id, record, extras, &what)?;
            out.items.push(info);
        }
        Ok(out)
    }

    /// The (partition, id) of the tasks of one page: the first `skip + page_size` entries
    /// of every (partition, state) set (READY's held keyed tasks included), merged by due,
    /// then the page cut out of them.
    async fn page_ids(
        &self,
        topic: &str,
        parts: u32,
        states: &[State],
        skip: u64,
        page_size: u64,
        what: &str,
    ) -> Result<Vec<(u32, String)>, BackendError> {
        let need = skip.saturating_add(page_size);
        let mut pipe = redis::pipe();
        let mut sources = Vec::new();
        for p in 0..parts {
            let pk = self.keys.partition(topic, p);
            for &st in states {
                let mut sets = vec![pk.state_set(st)];
                if st == State::Ready {
                    sets.push(pk.held());
                }
                for set in sets {
                    pipe.cmd("ZRANGE")
                        .arg(set)
                        .arg(0)
                        .arg(need.saturating_sub(1))
                        .arg("WITHSCORES");
                    sources.push((p, st));
                }
            }
        }
        let ranges: Vec<Value> = self
            .redis
            .io(what, pipe.query_async(&mut self.redis.conn()))
            .await?;
        let mut entries: Vec<(f64, u32, String)> = Vec::new();
        for (v, &(p, state)) in ranges.iter().zip(&sources) {
            for (member, score) in scored(v) {
                // READY members carry the due; DEAD ones are listed by when they went DEAD.
                let entry = match state {
                    State::Ready => {
                        ready_member(&member).map(|(due, _, id)| (due as f64, p, id.to_owned()))
                    }
                    State::Dead => dead_member(&member).map(|(_, id)| (score, p, id.to_owned())),
                    _ => Some((score, p, member)),
                };
                entries.extend(entry);
            }
        }
        entries.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(a.1.cmp(&b.1))
                .then_with(|| a.2.cmp(&b.2))
        });
        Ok(entries
            .into_iter()
            .skip(usize::try_from(skip).unwrap_or(usize::MAX))
            .take(usize::try_from(page_size).unwrap_or(usize::MAX))
            .map(|(_, p, id)| (p, id))
            .collect())
    }

    /// The counters of a topic.
    pub(super) async fn stats(&self, topic: &str) -> Result<TopicStats> {
        self.check_open()?;
        let Some(parts) = self.partitions(topic, false).await? else {
            return Ok(TopicStats::default());
        };
        let now = self.ctx.clock.now_ms();
        Ok(self.partition_stats(topic, parts, now).await?)
    }

    /// Every topic with tasks, by name, with its counters.
    pub(super) async fn topics(&self) -> Result<Vec<(String, TopicStats)>> {
        self.check_open()?;
        let what = "listing topics";
        let mut hgetall = redis::cmd("HGETALL");
        hgetall.arg(self.keys.registry());
        let mut conn = self.redis.conn();
        let registry: HashMap<String, u32> =
            self.redis.io(what, hgetall.query_async(&mut conn)).await?;
        let now = self.ctx.clock.now_ms();
        let mut names: Vec<(String, u32)> = registry.into_iter().collect();
        names.sort();
        // Topics are read TOPICS_IN_FLIGHT at a time: one round trip each, in sequence, made
        // a page of 1 000 topics cost 1 000 round trips; concurrent reads share the
        // multiplexed connection's pipeline. `buffered` keeps the topics in name order.
        let per_topic = futures_util::stream::iter(names)
            .map(|(topic, parts)| async move {
                let stats = self.partition_stats(&topic, parts, now).await?;
                Ok::<_, BackendError>((topic, stats))
            })
            .buffered(TOPICS_IN_FLIGHT);
        futures_util::pin_mut!(per_topic);
        let mut out = Vec::new();
        while let Some(read) = per_topic.next().await {
            let (topic, total) = read?;
            // A paused topic shows even without records (its pause is what it holds).
            if total.total > 0 || total.pause.paused {
                out.push((topic, total));
            }
        }
        Ok(out)
    }

    /// How many DELAYED tasks of `topic` fall due in each range of `bounds`: one `ZCOUNT`
    /// per (partition, range) on the partition's delayed set, all in one pipeline, summed
    /// over the partitions. No task is read.
    pub(super) async fn due_counts(&self, topic: &str, bounds: &[Millis]) -> Result<Vec<u64>> {
        self.check_open()?;
        let ranges = bounds.len().saturating_sub(1);
        let mut counts = vec![0u64; ranges];
        let Some(parts) = self.partitions(topic, false).await? else {
            return Ok(counts);
        };
        if ranges == 0 {
            return Ok(counts);
        }
        let what = format!("counting the delayed tasks of topic {topic:?} by due");
        let mut pipe = redis::pipe();
        for p in 0..parts {
            let delayed = self.keys.partition(topic, p).state_set(State::Delayed);
            for w in bounds.windows(2) {
                // [b_i, b_(i+1)): "(" makes the upper end exclusive.
                pipe.cmd("ZCOUNT")
                    .arg(&delayed)
                    .arg(w[0])
                    .arg(format!("({}", w[1]));
            }
        }
        let all: Vec<u64> = self
            .redis
            .io(&what, pipe.query_async(&mut self.redis.conn()))
            .await?;
        for per_partition in all.chunks(ranges) {
            for (sum, n) in counts.iter_mut().zip(per_partition) {
                *sum += n;
            }
        }
        Ok(counts)
    }

    /// The counters of a topic: one stats script per partition, summed; with topic-wide
    /// limits (`permits.rs`), what max_active and the rate hold back as its permits say.
    async fn partition_stats(
        &self,
        topic: &str,
        parts: u32,
        now: Millis,
    ) -> Result<TopicStats, BackendError> {
        let what = format!("reading the counters of topic {topic:?}");
        let keys: Vec<PartitionKeys> = (0..parts).map(|p| self.keys.partition(topic, p)).collect();
        let invs: Vec<ScriptInvocation<'_>> = keys
            .iter()
            .enumerate()
            .map(|(p, pk)| self.invocation(&SCRIPTS.stats, pk, topic, p as u32, now))
            .collect();
        let mut total = TopicStats::default();
        let mut wide = false;
        for result in self.redis.run_scripts(&what, &invs).await? {
            let (stats, topic_wide) = parse_stats(result?, &what)?;
            total.merge(&stats);
            wide |= topic_wide;
        }
        if wide {
            let (full, no_token) = self.permit_stats(topic).await?;
            // A task counts under the first limit that holds it, as a partition's stats say:
            // the topic at max_active holds every READY task, an empty bucket too, else the
            // keys held back count (the partitions said how many).
            if full || no_token {
                let ready = total.count(State::Ready);
                let held = &mut total.held_back;
                (held.max_active, held.rate, held.key) =
                    if full { (ready, 0, 0) } else { (0, ready, 0) };
            }
        }
        Ok(total)
    }
}

/// The counters of one partition from its stats script: six counts in state order, the
/// earliest due of a DELAYED task (-1: none), the pause (-2: none, -1: until resumed, else
/// its end), how many tasks expired, then the READY tasks held back by max_active, by the
/// rate and by max_active_per_key; and whether its limits are topic-wide.
fn parse_stats(value: Value, what: &str) -> Result<(TopicStats, bool), BackendError> {
    let Value::Array(items) = value else {
        return Err(BackendError::protocol(what, "stats reply is not an array"));
    };
    let nums: Vec<i64> = items.iter().filter_map(int).collect();
    if nums.len() != 13 {
        return Err(BackendError::protocol(
            what,
            "stats reply has not 13 values",
        ));
    }
    let mut stats = TopicStats::default();
    for (state, &n) in State::ALL.iter().zip(&nums) {
        stats.adjust(*state, n.max(0));
    }
    stats.next_due_ms = u64::try_from(nums[6]).ok();
    stats.expired = u64::try_from(nums[8]).unwrap_or(0);
    stats.held_back.max_active = u64::try_from(nums[9]).unwrap_or(0);
    stats.held_back.rate = u64::try_from(nums[10]).unwrap_or(0);
    stats.held_back.key = u64::try_from(nums[11]).unwrap_or(0);
    if nums[7] != -2 {
        stats.pause = Pause {
            paused: true,
            until_ms: u64::try_from(nums[7]).ok(),
        };
    }
    Ok((stats, nums[12] == 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_replies_parse() {
        let reply = Value::Array(
            [1, 2, 3, 4, 5, 6, 900, -2, 7, 0, 2, 1, 0]
                .map(Value::Int)
                .to_vec(),
        );
        let (stats, wide) = parse_stats(reply, "testing").unwrap();
        assert!(!wide);
        let held = stats.held_back;
        assert_eq!((held.max_active, held.rate, held.key), (0, 2, 1));
        let counts: Vec<u64> = State::ALL.iter().map(|&s| stats.count(s)).collect();
        assert_eq!(counts, [1, 2, 3, 4, 5, 6]);
        assert_eq!((stats.total, stats.next_due_ms), (21, Some(900)));
        assert_eq!(stats.expired, 7);
        assert!(!stats.pause.paused);
        let none = Value::Array(
            [0, 0, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 1]
                .map(Value::Int)
                .to_vec(),
        );
        let (paused, wide) = parse_stats(none, "testing").unwrap();
        assert!(wide);
        assert_eq!(paused.next_due_ms, None);
        assert_eq!(
            paused.pause,
            Pause {
                paused: true,
                until_ms: None
            }
        );
        let until = Value::Array(
            [0, 0, 0, 0, 0, 0, -1, 5000, 0, 0, 0, 0, 0]
                .map(Value::Int)
                .to_vec(),
        );
        assert_eq!(
            parse_stats(until, "testing").unwrap().0.pause.until_ms,
            Some(5000)
        );
        assert!(parse_stats(Value::Array(vec![Value::Int(1)]), "testing").is_err());
        assert!(parse_stats(Value::Nil, "testing").is_err());
    }
}
