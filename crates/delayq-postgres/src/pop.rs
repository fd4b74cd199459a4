//! Taking READY tasks inside a transaction: for one pop, or for the pops of a round of
//! consumers' calls ([`crate::consume`]), one after the other.
//!
//! The topics' rows are read once (their pauses and flow limits; those with limits locked
//! for the whole transaction, so the ACTIVE counts and the rate read there are exact across
//! instances), with the ACTIVE counts they need, and, if the local driver lags, the due
//! DELAYED tasks of the topics are promoted once. Then each pop in turn gets what a pop
//! alone would get after the ones before it: the counts, the keys at their limit and the
//! rate's state are kept up to date as tasks are taken (an `auto_finish` pop's tasks end
//! FINISHED, so they hold no slot for the pops after it), and READY rows are read with
//! `FOR UPDATE SKIP LOCKED` in rule 11's order.
//!
//! What makes a round cheap: a topic without limits is read once for the pop at hand and
//! the ones after it (`LIMIT` their sum); they take the rows in turn. A topic with limits is
//! read afresh by every pop, as a pop alone would read it, because what a pop may take there
//! depends on what the ones before it took; the rows taken so far are written first, so
//! the read sees them gone. Either way the rows a transaction took are written at the end
//! with one statement.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use deadpool_postgres::Transaction;
use delayq::Delivery;
use delayq_core::flow::take;
use delayq_core::lifecycle;
use delayq_core::{Millis, State};
use tokio_postgres::types::ToSql;

use crate::effects::Effects;
use crate::error::TxResult;
use crate::storage::{Inner, PROMOTE_BATCH, TopicRow};
use crate::task::{COLUMNS, Task, db};

/// The topics a statement reads, as its first parameter: `topic = $1` for one topic,
/// `topic = ANY($1)` for more. PostgreSQL plans a statement with `= ANY` of an array
/// parameter afresh at every call (its generic plan, made for an array of unknown length,
/// costs more than a custom one for a single element): the topics' read of a consumer round,
/// which reads one topic, spent twenty times as long in planning as in running
/// (`pg_stat_statements`, docs/performance.md).
struct TopicParam<'a>(&'a [String]);

impl TopicParam<'_> {
    /// `template` with `{topics}` replaced by the condition.
    fn sql(&self, template: &str) -> String {
        let condition = match self.0 {
            [_] => "topic = $1",
            _ => "topic = ANY($1)",
        };
        template.replace("{topics}", condition)
    }

    /// The parameter the condition reads.
    fn param(&self) -> &(dyn ToSql + Sync) {
        match self.0 {
            [one] => one,
            _ => &self.0,
        }
    }
}

/// One pop among those a transaction serves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    /// At most this many tasks (0: none).
    pub max: usize,
    /// Whether its tasks are finished as they are handed out.
    pub auto_finish: bool,
}

/// What the pops of a transaction know of their topics, kept as a pop run after the ones
/// so far would read it.
struct Topics {
    info: BTreeMap<String, TopicRow>,
    /// The topics with flow limits, their rows locked for the transaction.
    limited: Vec<String>,
    /// The ACTIVE counts of the limited topics.
    active: BTreeMap<String, usize>,
    /// `max_active_per_key` of the topics that have it.
    per_key: BTreeMap<String, usize>,
    /// The ACTIVE count of each key of those topics that has ACTIVE tasks.
    key_active: BTreeMap<(String, String), usize>,
}

impl Topics {
    /// Reads the rows of `topics` (sorted), locking those with limits, and their counts.
    async fn read(tx: &Transaction<'_>, topics: &[String]) -> TxResult<Topics> {
        let these = TopicParam(topics);
        let st = tx
            .prepare_cached(&these.sql(
                "SELECT topic, paused, pause_until_ms, limits, tat FROM topics \
                 WHERE {topics} ORDER BY topic",
            ))
            .await?;
        let mut info: BTreeMap<String, TopicRow> = BTreeMap::new();
        for row in tx.query(&st, &[these.param()]).await? {
            let t = TopicRow::from_row(&row)?;
            info.insert(t.topic.clone(), t);
        }
        let limited: Vec<String> = info
            .values()
            .filter(|t| t.limits.is_some())
            .map(|t| t.topic.clone())
            .collect();
        if !limited.is_empty() {
            // Read again under the lock: what another instance's pop left is what counts.
            let these = TopicParam(&limited);
            let st = tx
                .prepare_cached(&these.sql(
                    "SELECT topic, paused, pause_until_ms, limits, tat FROM topics \
                     WHERE {topics} ORDER BY topic FOR UPDATE",
                ))
                .await?;
            for row in tx.query(&st, &[these.param()]).await? {
                let t = TopicRow::from_row(&row)?;
                info.insert(t.topic.clone(), t);
            }
        }
        let active = if limited.is_empty() {
            BTreeMap::new()
        } else {
            active_counts(tx, &limited).await?
        };
        let per_key: BTreeMap<String, usize> = info
            .values()
            .filter_map(|t| Some((t.topic.clone(), t.limits?.max_active_per_key? as usize)))
            .collect();
        let key_active = if per_key.is_empty() {
            BTreeMap::new()
        } else {
            let with: Vec<String> = per_key.keys().cloned().collect();
            key_counts(tx, &with).await?.into_iter().collect()
        };
        Ok(Topics {
            info,
            limited,
            active,
            per_key,
            key_active,
        })
    }

    fn is_limited(&self, topic: &str) -> bool {
        self.info.get(topic).is_some_and(|t| t.limits.is_some())
    }

    /// How many of `want` `topic` lets go at `now`, and when its rate lets the next one go
    /// if it lets none.
    fn allowance(&self, topic: &str, now: Millis, want: usize) -> (usize, Option<Millis>) {
        match self.info.get(topic) {
            Some(t) if t.pause().holds(now) => (0, None),
            Some(t) => t.allowance(now, want, self.active.get(topic).copied().unwrap_or(0)),
            None => (want, None),
        }
    }

    /// The keys of `topic` at their limit: a read leaves their READY tasks out, so a busy key
    /// holds back no other.
    fn full_keys(&self, topic: &str) -> Vec<String> {
        let Some(&limit) = self.per_key.get(topic) else {
            return Vec::new();
        };
        self.key_active
            .iter()
            .filter(|((t, _), n)| t == topic && **n >= limit)
            .map(|((_, key), _)| key.clone())
            .collect()
    }

    /// Counts a task of `topic` with `key` taken; `false` (and nothing counted) when its key
    /// is at its limit.
    fn take_key(&mut self, topic: &str, key: Option<&str>) -> bool {
        let (Some(&limit), Some(key)) = (self.per_key.get(topic), key) else {
            return true;
        };
        let n = self
            .key_active
            .entry((topic.to_owned(), key.to_owned()))
            .or_default();
        if *n >= limit {
            return false;
        }
        *n += 1;
        true
    }

    /// Moves the rate of `topic` on by `n` tasks handed out at `now`.
    fn spend_rate(&mut self, topic: &str, now: Millis, n: usize) {
        if let Some(t) = self.info.get_mut(topic)
            && let Some(rate) = t.limits.and_then(|l| l.rate())
        {
            t.tat = take(rate, t.tat, now, n.min(u32::MAX as usize) as u32).tat;
        }
    }
}

impl Inner {
    /// Takes READY tasks over `topics` (sorted, without repeats) for each of `wants` in turn,
    /// obeying pauses and flow limits, in the transaction `tx`: what each pop gets, in order.
    /// Due DELAYED tasks of those topics are promoted first when the local driver lags
    /// ([`crate::driver::Driver::lags`]), so a pop never waits for it. Otherwise the driver
    /// promotes them: the look costs a scan past every promoted task's index entry that
    /// vacuum has not removed yet, which made it the dearest statement of a pop. See the
    /// module doc.
    pub(crate) async fn take_ready(
        &self,
        tx: &Transaction<'_>,
        topics: &[String],
        wants: &[Want],
        now: Millis,
        effects: &mut Effects,
    ) -> TxResult<Vec<Vec<Delivery>>> {
        let mut out: Vec<Vec<Delivery>> = wants.iter().map(|_| Vec::new()).collect();
        let total: usize = wants.iter().map(|w| w.max).sum();
        if total == 0 || topics.is_empty() {
            return Ok(out);
        }
        let mut t = Topics::read(tx, topics).await?;
        let live: Vec<String> = topics
            .iter()
            .filter(|topic| t.allowance(topic, now, total).0 > 0)
            .cloned()
            .collect();
        if !live.is_empty() && self.driver.lags(now) {
            self.promote(tx, Some(&live), now, PROMOTE_BATCH, effects)
                .await?;
        }

        let select = tx
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM tasks WHERE topic = $1 AND state = 1 \
                 AND (key IS NULL OR key <> ALL($3::text[])) \
                 ORDER BY priority, due_ms, seq LIMIT $2 FOR UPDATE SKIP LOCKED"
            ))
            .await?;
        // Rows read and not taken yet, in rule 11's order (taken from the front, mostly); the
        // topics without limits whose last read came back short; the tasks taken, of which
        // the first `written` are written already.
        let mut carried: VecDeque<Task> = VecDeque::new();
        let mut drained: BTreeSet<String> = BTreeSet::new();
        let mut taken: Vec<Task> = Vec::new();
        let mut written = 0;
        for (j, want) in wants.iter().enumerate() {
            if want.max == 0 {
                continue;
            }
            let later: usize = wants[j + 1..].iter().map(|w| w.max).sum();
            let mut room: BTreeMap<String, usize> = BTreeMap::new();
            for topic in topics {
                let (n, next_at) = t.allowance(topic, now, want.max);
                if let Some(at) = next_at {
                    effects.timer(at);
                }
                if n > 0 {
                    room.insert(topic.clone(), n);
                }
            }
            let before = want
                .auto_finish
                .then(|| (t.active.clone(), t.key_active.clone()));
            let mut went: BTreeMap<String, usize> = BTreeMap::new();
            let got = &mut out[j];
            let mut look_limited = true;
            loop {
                let left = want.max - got.len();
                let mut read = false;
                for (topic, &r) in &room {
                    let limited = t.is_limited(topic);
                    let n = if limited {
                        if !look_limited || r == 0 {
                            continue;
                        }
                        r.min(left)
                    } else {
                        if r == 0
                            || drained.contains(topic)
                            || carried.iter().any(|c| &c.topic == topic)
                        {
                            continue;
                        }
                        left + later
                    };
                    // Taken rows are READY in the table until written: write them first, so
                    // that the read sees them gone; and drop what was read of the topic
                    // before, which the read returns again if it is still to be had.
                    if written < taken.len() {
                        write_states(tx, &taken[written..], now).await?;
                        written = taken.len();
                    }
                    carried.retain(|c| &c.topic != topic);
                    let excluded = t.full_keys(topic);
                    let rows = tx.query(&select, &[topic, &(n as i64), &excluded]).await?;
                    if rows.len() < n && !limited {
                        drained.insert(topic.clone());
                    }
                    for row in rows {
                        carried.push_back(Task::from_row(&row)?);
                    }
                    read = true;
                }
                if read {
                    carried
                        .make_contiguous()
                        .sort_by_key(|c| (c.priority, c.due_ms, c.seq));
                }
                // Rows an expiry or a full key made this pop pass over: a limited topic is
                // read again, looking past them (as a pop alone does).
                let mut passed_over = false;
                let mut i = 0;
                while i < carried.len() && got.len() < want.max {
                    let c = &carried[i];
                    if room.get(&c.topic).is_none_or(|&r| r == 0) {
                        i += 1;
                        continue;
                    }
                    if lifecycle::is_expired(c.expires_at_ms, now) {
                        // Its expiry passed before the driver ran: never hand it out.
                        let Some(mut task) = carried.remove(i) else {
                            break;
                        };
                        self.expire_row(tx, &mut task, now, effects).await?;
                        passed_over = true;
                        continue;
                    }
                    let (topic, key) = (c.topic.clone(), c.key.clone());
                    if !t.take_key(&topic, key.as_deref()) {
                        passed_over = true;
                        i += 1;
                        continue;
                    }
                    let Some(mut task) = carried.remove(i) else {
                        break;
                    };
                    task.activate(self.receipt(), now, self.ctx.clock.window_start(now));
                    got.push(task.delivery());
                    if want.auto_finish {
                        let due = task.due_ms;
                        task.enter(State::Finished, due, now, self.ctx.defaults.retention_ms);
                    }
                    effects.timer(task.deadline_ms);
                    if let Some(r) = room.get_mut(&topic) {
                        *r -= 1;
                    }
                    *t.active.entry(topic.clone()).or_default() += 1;
                    *went.entry(topic).or_default() += 1;
                    taken.push(task);
                }
                if got.len() >= want.max {
                    break;
                }
                look_limited = passed_over;
                let more = room.iter().any(|(topic, &r)| {
                    r > 0
                        && !t.is_limited(topic)
                        && !drained.contains(topic)
                        && !carried.iter().any(|c| &c.topic == topic)
                });
                if !look_limited && !more {
                    break;
                }
            }
            for (topic, n) in went {
                t.spend_rate(&topic, now, n);
            }
            if let Some((active, keys)) = before {
                // FINISHED at once: the pops after this one do not count them.
                t.active = active;
                t.key_active = keys;
            }
        }
        if written < taken.len() {
            write_states(tx, &taken[written..], now).await?;
        }

        // The rate of rate-limited topics as spent, and a wake-up when it holds back.
        for topic in &t.limited {
            let Some(row) = t.info.get(topic) else {
                continue;
            };
            let Some(rate) = row.limits.and_then(|l| l.rate()) else {
                continue;
            };
            let wake = take(rate, row.tat, now, 1).next_at;
            if let Some(at) = wake {
                effects.timer(at);
            }
            let st = tx
                .prepare_cached(
                    "UPDATE topics SET tat = $2, rate_wake_ms = \
                     CASE WHEN $3::bigint IS NULL THEN rate_wake_ms \
                          ELSE LEAST(COALESCE(rate_wake_ms, $3), $3) END \
                     WHERE topic = $1",
                )
                .await?;
            tx.execute(&st, &[topic, &row.tat, &wake.map(db)]).await?;
        }
        Ok(out)
    }
}

/// Writes the state, receipt and deadline of tasks a transaction changed (handed out,
/// finished) in one statement.
///
/// Each row is found by one primary-key lookup and updated by its ctid (a TID scan), so no
/// plan scans the table: joined on `(topic, id)`, a planner that misjudged the table's size
/// (it grew since its last ANALYZE, or since the cached plan was made) hash-joined a scan of
/// the whole table. The rows are locked by the transaction, so the ctids it reads hold.
pub(crate) async fn write_states(
    tx: &Transaction<'_>,
    tasks: &[Task],
    now: Millis,
) -> std::result::Result<(), tokio_postgres::Error> {
    let st = tx
        .prepare_cached(
            "WITH r AS (SELECT k.c, u.state, u.receipt, u.deadline \
             FROM unnest($2::text[], $3::text[], $4::smallint[], $5::text[], $6::bigint[]) \
             AS u(topic, id, state, receipt, deadline) CROSS JOIN LATERAL \
             (SELECT ctid AS c FROM tasks WHERE topic = u.topic AND id = u.id LIMIT 1) k) \
             UPDATE tasks t SET state = r.state, receipt = r.receipt, deadline_ms = r.deadline, \
             updated_at_ms = $1 FROM r WHERE t.ctid = r.c",
        )
        .await?;
    let topics: Vec<&str> = tasks.iter().map(|t| t.topic.as_str()).collect();
    let ids: Vec<&str> = tasks.iter().map(|t| t.id.as_str()).collect();
    let states: Vec<i16> = tasks.iter().map(|t| t.state.code() as i16).collect();
    let receipts: Vec<Option<&str>> = tasks.iter().map(|t| t.receipt.as_deref()).collect();
    let deadlines: Vec<i64> = tasks.iter().map(|t| db(t.deadline_ms)).collect();
    tx.execute(
        &st,
        &[&db(now), &topics, &ids, &states, &receipts, &deadlines],
    )
    .await?;
    Ok(())
}

async fn active_counts(
    tx: &Transaction<'_>,
    topics: &[String],
) -> std::result::Result<BTreeMap<String, usize>, tokio_postgres::Error> {
    let these = TopicParam(topics);
    let st = tx
        .prepare_cached(
            &these.sql(
                "SELECT topic, count(*) FROM tasks WHERE {topics} AND state = 2 GROUP BY topic",
            ),
        )
        .await?;
    Ok(tx
        .query(&st, &[these.param()])
        .await?
        .into_iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as usize))
        .collect())
}

/// The ACTIVE count of each key of `topics` that has ACTIVE tasks.
async fn key_counts(
    tx: &Transaction<'_>,
    topics: &[String],
) -> std::result::Result<Vec<((String, String), usize)>, tokio_postgres::Error> {
    let these = TopicParam(topics);
    let st = tx
        .prepare_cached(&these.sql(
            "SELECT topic, key, count(*) FROM tasks WHERE {topics} AND state = 2 \
             AND key IS NOT NULL GROUP BY topic, key",
        ))
        .await?;
    Ok(tx
        .query(&st, &[these.param()])
        .await?
        .into_iter()
        .map(|r| ((r.get(0), r.get(1)), r.get::<_, i64>(2) as usize))
        .collect())
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use tokio_postgres::types::Type;

    use super::TopicParam;

    #[test]
    fn one_topic_is_read_by_equality_more_by_any() {
        let template = "SELECT topic FROM topics WHERE {topics} ORDER BY topic";
        for (topics, sql) in [
            (
                &["a"][..],
                "SELECT topic FROM topics WHERE topic = $1 ORDER BY topic",
            ),
            (
                &["a", "b"][..],
                "SELECT topic FROM topics WHERE topic = ANY($1) ORDER BY topic",
            ),
            (
                &[][..],
                "SELECT topic FROM topics WHERE topic = ANY($1) ORDER BY topic",
            ),
        ] {
            let topics: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
            let these = TopicParam(&topics);
            assert_eq!(these.sql(template), sql, "{topics:?}");
            // The parameter fits the condition: text for `=`, text[] for `ANY`.
            let fits = |ty: Type| {
                these
                    .param()
                    .to_sql_checked(&ty, &mut BytesMut::new())
                    .is_ok()
            };
            let one = topics.len() == 1;
            assert_eq!(fits(Type::TEXT), one, "{topics:?} as text");
            assert_eq!(fits(Type::TEXT_ARRAY), !one, "{topics:?} as text[]");
        }
    }
}
