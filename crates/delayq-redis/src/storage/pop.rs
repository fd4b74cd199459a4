//! Popping: handing out READY tasks in the order of rule 11 (priority, due, insertion)
//! across the partitions of one topic or of several (beanstalkd's watch list).
//!
//! With one partition, pop is one `pop` script. With more, it is best effort in two round
//! trips: one pipeline of `peek` scripts reads the first `max` READY (and due DELAYED)
//! entries of every partition with their order keys (priority, due, insertion number) and
//! the partition's pause, the `max` best of them make a plan of how many to take from which
//! partition, and one pipeline of `pop` scripts takes them (each script promotes what is due
//! in its partition first, so a lagging promoter never holds tasks back, and refuses to hand
//! out from a paused partition). When another consumer was faster on a partition, the rest
//! is taken from the other partitions that had candidates, so no ready task is left behind
//! while this consumer goes back to wait. Insertion numbers come from the adding instance
//! (docs/storage.md), so among tasks of equal priority and due in different partitions the
//! order is FIFO for tasks added through one instance and undefined between instances.
//!
//! A pop that finds a topic paused until some instant arranges for this instance's parked
//! consumers of that topic to be woken then ([`InstanceState::wake_at_pause_end`]).
//!
//! Receipts are 12 random hex digits per pop script (from a per-instance seed and a counter
//! through splitmix64) followed by 4 the script appends per task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use delayq::storage::coalesce::{Coalescer, ConsumerCall};
use delayq::{Delivery, Millis, Result, State};
use delayq_core::hash::splitmix64;
use redis::Value;

use super::InstanceState;
use crate::error::BackendError;
use crate::keys::PartitionKeys;
use crate::record::parse_trace_text;
use crate::scripts::{Events, Reply, SCRIPTS, ScriptInvocation, bytes, int, text};

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
    pub(super) fn prefix(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        format!("{:012x}", splitmix64(self.seed ^ n) >> 16)
    }
}

/// One partition of one topic.
pub(super) type Part<'t> = (&'t str, u32);

/// What one partition's pop script did: the partition, how many were asked, what was taken.
type Taken<'t> = (Part<'t>, usize, Vec<(u64, Delivery)>);

/// How many rounds a pop takes at most when a topic with topic-wide limits leaves it short
/// (keys held back, grants that went to faster consumers).
const WIDE_ROUNDS: usize = 16;

/// Most tasks one shared round of pops hands out.
const SHARED_ROUND_TASKS: usize = 1_000;

/// Concurrent pops of one topic of several partitions, by topic and `auto_finish`: each asks
/// for a count of tasks (`InstanceState::pop_shared`).
pub(super) type SharedPops = Coalescer<(String, bool), usize, Vec<Delivery>>;

/// A task a pop may take: its order keys (priority, due, insertion), partition and id, and
/// for a partition whose limits are topic-wide the key (`""` none) and ttr its permit needs.
#[derive(Debug)]
pub(super) struct Candidate<'t> {
    pub order: [u64; 3],
    pub part: Part<'t>,
    pub id: String,
    pub permit: Option<(String, u64)>,
}

/// What the `peek` script says of one partition: its pause (`-2` none, `-1` until resumed,
/// else its end) and its first entries, each with its three order keys and its id.
#[derive(Debug, Default)]
pub(super) struct Heads {
    pub pause: i64,
    pub entries: Vec<([u64; 3], String)>,
    /// READY entries of a partition whose limits are topic-wide (handed out only with the
    /// topic's permits, `permits.rs`): each entry's key (`""` none) and ttr. Empty otherwise.
    pub permits: Vec<(String, u64)>,
}

impl InstanceState {
    /// Takes up to `max` READY tasks of `topics` in the order of rule 11 across them (best
    /// effort across partitions), finishing them at once with `auto_finish`. Paused topics
    /// give nothing.
    pub(super) async fn pop(
        self: &Arc<Self>,
        topics: &[&str],
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        self.check_open()?;
        let mut parts: Vec<Part<'_>> = Vec::new();
        for (i, &topic) in topics.iter().enumerate() {
            if topics[..i].contains(&topic) {
                continue;
            }
            if let Some(n) = self.partitions(topic, false).await? {
                parts.extend((0..n).map(|p| (topic, p)));
            }
        }
        if let [(topic, p)] = parts[..] {
            let call = ConsumerCall::pop(max, auto_finish);
            return Ok(self.consume(topic, p, call).await?.tasks);
        }
        if parts.is_empty() {
            return Ok(Vec::new());
        }
        if let [topic] = topics {
            return self.pop_shared(topic, max, auto_finish).await;
        }
        self.pop_rounds(parts, max, auto_finish).await
    }

    /// A pop of `max` tasks of `topic` (of several partitions) in one round with the other
    /// pops of the topic queued on this instance meanwhile: one pop of all they ask for, its
    /// tasks dealt out in order (the first caller gets the first tasks). Pops planned apart
    /// would race each other for the same first tasks of each partition (and with topic-wide
    /// limits each get a grant for them, which only one can use).
    async fn pop_shared(
        self: &Arc<Self>,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        let state = Arc::clone(self);
        self.shared_pops
            .call(
                (topic.to_owned(), auto_finish),
                max,
                "popping tasks",
                move |key| {
                    tokio::spawn(async move {
                        let fits = || {
                            let mut total = 0;
                            move |n: &usize| {
                                total += n;
                                total <= SHARED_ROUND_TASKS
                            }
                        };
                        let (s, key) = (&state, &key);
                        s.shared_pops
                            .serve(key, fits, |round| async move {
                                s.serve_shared_round(&key.0, &round, key.1).await
                            })
                            .await;
                    });
                },
            )
            .await
    }

    /// One shared round: a pop of all that `counts` ask for, dealt out in their order.
    async fn serve_shared_round(
        self: &Arc<Self>,
        topic: &str,
        counts: &[usize],
        auto_finish: bool,
    ) -> Result<Vec<Result<Vec<Delivery>>>> {
        let Some(n) = self.partitions(topic, false).await? else {
            return Ok(counts.iter().map(|_| Ok(Vec::new())).collect());
        };
        let parts: Vec<Part<'_>> = (0..n).map(|p| (topic, p)).collect();
        let mut got = self
            .pop_rounds(parts, counts.iter().sum(), auto_finish)
            .await?
            .into_iter();
        Ok(counts
            .iter()
            .map(|&n| Ok(got.by_ref().take(n).collect()))
            .collect())
    }

    /// Takes up to `max` READY tasks of the partitions `parts` (of one topic or several):
    /// a pop planned across them, in rounds. A topic with topic-wide limits may leave a round
    /// short of `max` while READY tasks wait that may go (module doc of `permits.rs`): the
    /// pop takes another round then, without the topics whose limits stopped it (so a watch
    /// list is not held up by one of them).
    pub(super) async fn pop_rounds(
        self: &Arc<Self>,
        mut parts: Vec<Part<'_>>,
        max: usize,
        auto_finish: bool,
    ) -> Result<Vec<Delivery>> {
        let mut got = Vec::new();
        for _ in 0..WIDE_ROUNDS {
            let (more, again, stopped) = self
                .pop_planned(&parts, max - got.len(), auto_finish)
                .await?;
            got.extend(more);
            parts.retain(|(t, _)| !stopped.contains(t));
            if got.len() >= max || !again || parts.is_empty() {
                break;
            }
        }
        got.sort_by_key(|(seq, d)| (d.priority, d.due_ms, *seq));
        Ok(got.into_iter().map(|(_, d)| d).collect())
    }

    /// One round of a pop across `parts`: what it took (with insertion numbers), whether
    /// a topic with topic-wide limits may have more that could go now, and the topics whose
    /// topic-wide limits let nothing more go.
    async fn pop_planned<'t>(
        self: &Arc<Self>,
        parts: &[Part<'t>],
        max: usize,
        auto_finish: bool,
    ) -> Result<(Vec<(u64, Delivery)>, bool, Vec<&'t str>)> {
        let now = self.ctx.clock.now_ms();
        let candidates = self.pop_candidates(parts, max, now).await?;
        if candidates.is_empty() {
            return Ok((Vec::new(), false, Vec::new()));
        }
        // The first `max` make the plan: how many from which partition, and how many from
        // each topic whose limits are topic-wide (those go through its permits, `permits.rs`,
        // which may skip a candidate of a key at its limit for a later one).
        let mut plan: Vec<(Part<'_>, usize)> = Vec::new();
        let mut wide: Vec<(&str, usize)> = Vec::new();
        for c in candidates.iter().take(max) {
            if c.permit.is_some() {
                match wide.iter_mut().find(|(t, _)| *t == c.part.0) {
                    Some((_, n)) => *n += 1,
                    None => wide.push((c.part.0, 1)),
                }
            } else {
                match plan.iter_mut().find(|(q, _)| *q == c.part) {
                    Some((_, n)) => *n += 1,
                    None => plan.push((c.part, 1)),
                }
            }
        }
        let mut got = Vec::new();
        let mut again = false;
        let mut stopped = Vec::new();
        for (topic, want) in wide {
            let theirs = complete_prefix(&candidates, topic, max);
            let (taken, more, full) = self
                .pop_wide(topic, &theirs, want, auto_finish, now)
                .await?;
            again |= more;
            if full && taken.len() < want {
                // Its share of this round goes to the other topics' next candidates.
                stopped.push(topic);
                again |= candidates.iter().any(|c| c.part.0 != topic);
            }
            got.extend(taken);
        }
        if plan.is_empty() {
            return Ok((got, again, stopped));
        }
        let mut exhausted = Vec::new();
        for (part, wanted, taken) in self.pop_partitions(&plan, auto_finish, now).await? {
            if taken.len() < wanted {
                exhausted.push(part);
            }
            got.extend(taken);
        }
        // Another consumer was faster on some partition: take the rest from the other
        // partitions that had candidates, best first.
        let mut others: Vec<Part<'_>> = Vec::new();
        for c in candidates.iter().filter(|c| c.permit.is_none()) {
            if !exhausted.contains(&c.part) && !others.contains(&c.part) {
                others.push(c.part);
            }
        }
        for part in others {
            if got.len() >= max {
                break;
            }
            let more = self
                .pop_partitions(&[(part, max - got.len())], auto_finish, now)
                .await?;
            got.extend(more.into_iter().flat_map(|(_, _, taken)| taken));
        }
        Ok((got, again, stopped))
    }

    /// The first `max` tasks of every partition in pop order (READY and due DELAYED, from
    /// the `peek` script), best first, leaving out paused partitions.
    async fn pop_candidates<'t>(
        &self,
        parts: &[Part<'t>],
        max: usize,
        now: Millis,
    ) -> Result<Vec<Candidate<'t>>, BackendError> {
        let heads = self.heads(parts, State::Ready, max, now).await?;
        let mut candidates = Vec::new();
        for (&part, h) in parts.iter().zip(heads) {
            if h.pause != -2 {
                self.wake_at_pause_end(part.0, h.pause);
                continue;
            }
            let mut permits = h.permits.into_iter();
            candidates.extend(h.entries.into_iter().map(|(order, id)| Candidate {
                order,
                part,
                id,
                permit: permits.next(),
            }));
        }
        candidates.sort_by(|a, b| a.order.cmp(&b.order).then(a.part.cmp(&b.part)));
        Ok(candidates)
    }

    /// Runs the `peek` script on every partition of `parts` for `state`, `max` entries each.
    pub(super) async fn heads(
        &self,
        parts: &[Part<'_>],
        state: State,
        max: usize,
        now: Millis,
    ) -> Result<Vec<Heads>, BackendError> {
        let what = "looking at the first tasks of a topic";
        let keys: Vec<PartitionKeys> = parts
            .iter()
            .map(|&(t, p)| self.keys.partition(t, p))
            .collect();
        let invs: Vec<ScriptInvocation<'_>> = parts
            .iter()
            .zip(&keys)
            .map(|(&(t, p), pk)| {
                let mut inv = self.invocation(&SCRIPTS.peek, pk, t, p, now);
                inv.arg(state.code()).arg(max);
                inv
            })
            .collect();
        self.redis
            .run_scripts(what, &invs)
            .await?
            .into_iter()
            .map(|r| parse_heads(&r?, what))
            .collect()
    }

    /// Makes sure the consumers of `topic` parked on this instance are woken when a pause
    /// that ends at `pause` (epoch ms; negative: none, or until resumed) is over, once per
    /// (topic, end). A consumer parks only after a pop found the topic paused, so every
    /// instance with parked consumers learns the end this way; a resume wakes them through
    /// the script's ready event instead.
    pub(super) fn wake_at_pause_end(&self, topic: &str, pause: i64) {
        let Ok(until) = Millis::try_from(pause) else {
            return;
        };
        {
            let mut wakes = self.pause_wakes.lock();
            if wakes.get(topic) == Some(&until) {
                return;
            }
            wakes.insert(topic.to_owned(), until);
        }
        let wakes = std::sync::Arc::clone(&self.pause_wakes);
        let waiters = std::sync::Arc::clone(&self.ctx.waiters);
        let sleep = self.ctx.clock.sleep_until(until);
        let topic = topic.to_owned();
        tokio::spawn(async move {
            sleep.await;
            {
                let mut wakes = wakes.lock();
                if wakes.get(&topic) == Some(&until) {
                    wakes.remove(&topic);
                }
            }
            waiters.notify(&topic, usize::MAX);
        });
    }

    /// Pops from one or more partitions in one pipeline: `(partition, count)` each. Returns,
    /// per partition that answered, what was asked and what was taken.
    async fn pop_partitions<'t>(
        &self,
        plan: &[(Part<'t>, usize)],
        auto_finish: bool,
        now: Millis,
    ) -> Result<Vec<Taken<'t>>, BackendError> {
        let what = "popping tasks";
        let keys: Vec<PartitionKeys> = plan
            .iter()
            .map(|&((t, p), _)| self.keys.partition(t, p))
            .collect();
        let promote = self.options.promote_batch.to_string();
        let invs: Vec<ScriptInvocation<'_>> = plan
            .iter()
            .zip(&keys)
            .map(|(&((t, p), count), pk)| {
                let mut inv = self.invocation(&SCRIPTS.pop, pk, t, p, now);
                inv.arg(count)
                    .arg(if auto_finish { "1" } else { "0" })
                    .arg(self.receipts.prefix())
                    .arg(&promote);
                inv
            })
            .collect();
        let mut out = Vec::new();
        let mut first_error = None;
        let results = self.redis.run_scripts(what, &invs).await?;
        for (&(part, wanted), result) in plan.iter().zip(results) {
            let reply = match result.and_then(|v| Reply::parse(v, what)) {
                Ok(reply) => reply,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            out.push((part, wanted, self.popped(part, &reply, now, what)?));
        }
        match first_error {
            // Tasks taken from other partitions are handed out; the failure shows next time.
            Some(e) if out.iter().all(|(_, _, taken)| taken.is_empty()) => Err(e),
            _ => Ok(out),
        }
    }
}

/// The candidates of `topic` (sorted) up to the first place where a partition's list, cut
/// at `max`, may leave out better tasks: there the order across partitions is no longer
/// known. A partition that gave fewer than `max` gave all it had.
fn complete_prefix<'c, 't>(
    candidates: &'c [Candidate<'t>],
    topic: &str,
    max: usize,
) -> Vec<&'c Candidate<'t>> {
    let theirs: Vec<&Candidate<'t>> = candidates.iter().filter(|c| c.part.0 == topic).collect();
    let mut counts: Vec<(Part<'t>, usize)> = Vec::new();
    let mut end = theirs.len();
    for (i, c) in theirs.iter().enumerate() {
        let n = match counts.iter_mut().find(|(q, _)| *q == c.part) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                counts.push((c.part, 1));
                1
            }
        };
        if n == max {
            // The last of a full list: what follows may sort after tasks it left out.
            end = i + 1;
            break;
        }
    }
    theirs.into_iter().take(end).collect()
}

impl InstanceState {
    /// What the pop script on `part` handed out, each with its insertion number; applies its
    /// effects, its pause and the lateness of what it promoted.
    fn popped(
        &self,
        part: Part<'_>,
        reply: &Reply,
        now: Millis,
        what: &str,
    ) -> Result<Vec<(u64, Delivery)>, BackendError> {
        self.effects(part.0, part.1, reply);
        let popped = parse_pop(part.0, &reply.payload, what)?;
        self.wake_at_pause_end(part.0, popped.pause);
        self.record_events(part.0, &popped.promoted, now);
        Ok(popped.deliveries)
    }
}

/// The reply of the `peek` script: the pause, the count, the values per entry (4, or 6 with
/// each entry's key and ttr), the entries.
fn parse_heads(value: &Value, what: &str) -> Result<Heads, BackendError> {
    let bad = |detail: &str| BackendError::protocol(what, detail.to_owned());
    let Value::Array(items) = value else {
        return Err(bad("peek reply is not an array"));
    };
    let pause = items.first().and_then(int).ok_or_else(|| bad("no pause"))?;
    let count = |i: usize| {
        items
            .get(i)
            .and_then(int)
            .and_then(|n| usize::try_from(n).ok())
    };
    let n = count(1).ok_or_else(|| bad("no count"))?;
    let width = count(2)
        .filter(|w| matches!(w, 4 | 6))
        .ok_or_else(|| bad("no width of 4 or 6"))?;
    let rest = items
        .get(3..3 + n * width)
        .ok_or_else(|| bad("too few values"))?;
    // Numbers come as integers; insertion numbers as 16 hex digits.
    let key = |v: &Value| match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => u64::from_str_radix(&text(other)?, 16).ok(),
    };
    let entries = rest
        .chunks_exact(width)
        .map(|e| Some(([key(&e[0])?, key(&e[1])?, key(&e[2])?], text(&e[3])?)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad("an entry with a bad field"))?;
    let permits = if width == 6 {
        rest.chunks_exact(width)
            .map(|e| Some((text(&e[4])?, u64::try_from(int(&e[5])?).ok()?)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("an entry with a bad key or ttr"))?
    } else {
        Vec::new()
    };
    Ok(Heads {
        pause,
        entries,
        permits,
    })
}

/// What a pop script reports.
#[derive(Debug)]
struct Popped {
    /// Each with its insertion number.
    deliveries: Vec<(u64, Delivery)>,
    /// `-2` not paused, `-1` paused until resumed, else the end of the pause.
    pause: i64,
    /// What it promoted.
    promoted: Events,
}

/// The values `pop.lua` and `consume.lua` reply with per task.
pub(super) const POP_VALUES: usize = 10;

/// The deliveries of a pop reply, the pause, and the due times of the tasks it promoted.
fn parse_pop(topic: &str, payload: &[Value], what: &str) -> Result<Popped, BackendError> {
    let bad = |detail: &str| BackendError::protocol(what, detail.to_owned());
    let n = payload
        .first()
        .and_then(int)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| bad("no task count"))?;
    let pause = payload
        .get(1)
        .and_then(int)
        .ok_or_else(|| bad("no pause"))?;
    let tasks = payload
        .get(2..2 + n * POP_VALUES)
        .ok_or_else(|| bad("too few values"))?;
    let deliveries =
        parse_deliveries(topic, tasks).ok_or_else(|| bad("a task with a bad field"))?;
    let promoted =
        Events::parse(&payload[2 + n * POP_VALUES..]).ok_or_else(|| bad("bad promotions"))?;
    Ok(Popped {
        deliveries,
        pause,
        promoted,
    })
}

/// The tasks of a pop reply (`hand_out` in `lib.lua`): [`POP_VALUES`] values each, with
/// its insertion number; `None` when a field is bad.
pub(super) fn parse_deliveries(topic: &str, values: &[Value]) -> Option<Vec<(u64, Delivery)>> {
    values
        .chunks_exact(POP_VALUES)
        .map(|t| {
            let seq = u64::from_str_radix(&text(&t[7])?, 16).ok()?;
            let trace = match text(&t[8])?.as_str() {
                "" => None,
                field => Some(parse_trace_text(field)?),
            };
            let d = Delivery {
                id: text(&t[0])?,
                topic: topic.to_owned(),
                body: bytes(&t[1])?,
                priority: u32::try_from(int(&t[6])?).ok()?,
                retries: u32::try_from(int(&t[2])?).ok()?,
                receipt: text(&t[3])?,
                due_ms: u64::try_from(int(&t[4])?).ok()?,
                ttr_ms: u64::try_from(int(&t[5])?).ok()?,
                trace,
                key: Some(text(&t[9])?).filter(|k| !k.is_empty()),
            };
            Some((seq, d))
        })
        .collect()
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
            Value::Int(-2),
            bulk("id-1"),
            bulk("body"),
            bulk("2"),
            bulk("00000000000a0001"),
            bulk("1000"),
            bulk("30000"),
            Value::Int(7),
            bulk("0000000000000005"),
            bulk("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 a=1\tb=2"),
            bulk("merchant-1"),
            Value::Int(1),
            Value::Int(990),
        ];
        let popped = parse_pop("t", &payload, "testing").unwrap();
        let (d, promoted) = (popped.deliveries, popped.promoted);
        assert_eq!((popped.pause, d[0].1.priority, d[0].0), (-2, 7, 5));
        let d: Vec<Delivery> = d.into_iter().map(|(_, d)| d).collect();
        assert_eq!(d.len(), 1);
        assert_eq!(
            (d[0].id.as_str(), d[0].retries, d[0].due_ms),
            ("id-1", 2, 1_000)
        );
        assert_eq!(d[0].key.as_deref(), Some("merchant-1"));
        let trace = d[0].trace.as_ref().expect("the trace context");
        assert_eq!(trace.tracestate(), Some("a=1,b=2"));
        assert_eq!(promoted.dues, vec![990]);
        assert!(promoted.traced.is_empty());
        assert!(parse_pop("t", &[Value::Int(2), Value::Int(-2)], "testing").is_err());
        let heads = Value::Array(vec![
            Value::Int(5000),
            Value::Int(1),
            Value::Int(4),
            Value::Int(7),
            Value::Int(1000),
            bulk("00000000000000ff"),
            bulk("a"),
        ]);
        let h = parse_heads(&heads, "testing").unwrap();
        assert_eq!(h.pause, 5000);
        assert_eq!(h.entries, vec![([7, 1000, 0xff], "a".to_owned())]);
        assert!(h.permits.is_empty());
        let wide = Value::Array(vec![
            Value::Int(-2),
            Value::Int(1),
            Value::Int(6),
            Value::Int(7),
            Value::Int(1000),
            bulk("00000000000000ff"),
            bulk("a"),
            bulk("merchant-1"),
            Value::Int(30_000),
        ]);
        let h = parse_heads(&wide, "testing").unwrap();
        assert_eq!(h.permits, vec![("merchant-1".to_owned(), 30_000)]);
        assert!(
            parse_heads(
                &Value::Array(vec![Value::Int(-2), Value::Int(1), Value::Int(4)]),
                "testing"
            )
            .is_err()
        );
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
