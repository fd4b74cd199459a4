//! Flow limits of a topic of several partitions: the topic's permits (docs/flow-control.md,
//! "Topic-wide limits" in `scripts/lib.lua`).
//!
//! A topic of one partition keeps its limits in that partition, where the script that hands
//! a task out checks them. A topic of several partitions spans several slots of a Cluster,
//! and no script reaches two slots, so its counts live in a slot of their own, the topic's
//! permits: each of its ACTIVE tasks holds a permit (its receipt) until its ttr deadline,
//! keyed permits count per key, and the rate's state is kept beside them. A pop then takes
//! three steps:
//!
//! 1. **Candidates**: the first READY tasks of every partition with their keys and ttrs
//!    (the `peek` of [`super::pop`]), in rule 11's order across partitions.
//! 2. **Grant** (`permit_grant`): one script decides, candidate by candidate in that order,
//!    while the topic has room under `max_active` and its rate a token, whether the
//!    candidate's key has room; each grant is a permit that lasts until the start of the
//!    task's ttr window plus its ttr plus [`GRANT_GRACE_MS`]. A key that has no room is held
//!    back in the candidate's partition, so that a busy key does not keep other keys' tasks
//!    behind it.
//! 3. **Take** (`flow_take`, one per partition) hands out exactly the granted tasks that are
//!    still READY, and refuses a grant whose task's ttr would end after its permit (a take
//!    that comes late); then **settle** (`permit_release`) shortens the permits of the tasks
//!    taken to their deadlines and gives back the others, and the rate's tokens with them.
//!
//! A task that leaves ACTIVE (finish, release, bury, cancel, delete, a ttr that ran out)
//! names its receipt in the script's reply, and the instance gives the permit back. So the
//! permits never number fewer than the ACTIVE tasks: a reply lost between two steps, or an
//! instance killed there, only leaves a permit in place until its time passes (its task's
//! ttr, or a grant's ttr and grace), which holds a slot longer than needed and never lets a
//! limit be passed. A touch first holds the permit longer, then restarts the ttr within it.

use std::collections::BTreeMap;

use delayq::{Delivery, Millis};
use redis::Value;

use super::InstanceState;
use super::pop::{Candidate, POP_VALUES, parse_deliveries};
use crate::error::BackendError;
use crate::keys::PartitionKeys;
use crate::scripts::{Events, Reply, SCRIPTS, Script, ScriptInvocation, clock_arg, int, text};

/// How long a grant holds its slot beyond the ttr window it allows: the latest a pop's take
/// may follow its grant (a later take is refused). Also how long past a task's ttr a slot
/// stays held when the instance that popped it died between the grant and the settle.
pub(crate) const GRANT_GRACE_MS: u64 = 2_000;

/// The longest a partition holds back a key the permits refused, should the news that the
/// key has room again be lost: the partition looks again then.
pub(crate) const KEY_HOLD_MS: u64 = 1_000;

/// Most candidates one grant considers: receipts number them in 4 hex digits.
const MOST_CANDIDATES: usize = 0xffff;

/// What a permit script reports before its own values (`permit_reply` in `lib.lua`).
#[derive(Debug)]
pub(super) struct PermitReply {
    /// Permits it gave back.
    freed: u64,
    /// Whether the topic was at its `max_active` before.
    was_full: bool,
    /// Keys that have free permits again, each with the partitions holding it back.
    unblock: Vec<(String, Vec<u32>)>,
    pub payload: Vec<Value>,
}

impl PermitReply {
    fn parse(value: Value, what: &str) -> Result<PermitReply, BackendError> {
        let bad = |detail: &str| BackendError::protocol(what, detail.to_owned());
        let Value::Array(items) = value else {
            return Err(bad("a permit reply is not an array"));
        };
        let num = |i: usize| items.get(i).and_then(int);
        let freed = num(0)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| bad("no freed count"))?;
        let was_full = num(1).ok_or_else(|| bad("no fullness"))? == 1;
        let n = num(2)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad("no count of keys"))?;
        let pairs = items.get(3..3 + 2 * n).ok_or_else(|| bad("too few keys"))?;
        let unblock = pairs
            .chunks_exact(2)
            .map(|p| {
                let parts = text(&p[1])?
                    .split(',')
                    .map(|s| s.parse().ok())
                    .collect::<Option<Vec<u32>>>()?;
                Some((text(&p[0])?, parts))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a key with bad partitions"))?;
        Ok(PermitReply {
            freed,
            was_full,
            unblock,
            payload: items[3 + 2 * n..].to_vec(),
        })
    }
}

/// What `permit_grant` decided: per candidate whether it was granted, the keys to hold back
/// (key, partition, until when), and when the limits let the next task go (if they stopped
/// the grants).
#[derive(Debug, PartialEq, Eq)]
struct Grants {
    granted: Vec<bool>,
    holds: Vec<(String, u32, Millis)>,
    next_at: Option<Millis>,
}

impl Grants {
    fn parse(payload: &[Value], candidates: usize, what: &str) -> Result<Grants, BackendError> {
        let bad = |detail: &str| BackendError::protocol(what, detail.to_owned());
        let num = |i: usize| payload.get(i).and_then(int);
        let next_at = u64::try_from(num(0).ok_or_else(|| bad("no next instant"))?).ok();
        if num(1) != i64::try_from(candidates).ok() {
            return Err(bad("a count of candidates other than the candidates sent"));
        }
        let granted = (0..candidates)
            .map(|i| num(2 + i).map(|g| g == 1))
            .collect::<Option<Vec<bool>>>()
            .ok_or_else(|| bad("too few grants"))?;
        let at = 2 + candidates;
        let n = num(at)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad("no count of holds"))?;
        let holds = payload
            .get(at + 1..at + 1 + 3 * n)
            .ok_or_else(|| bad("too few holds"))?
            .chunks_exact(3)
            .map(|h| {
                Some((
                    text(&h[0])?,
                    u32::try_from(int(&h[1])?).ok()?,
                    u64::try_from(int(&h[2])?).ok()?,
                ))
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("a hold with a bad field"))?;
        Ok(Grants {
            granted,
            holds,
            next_at,
        })
    }
}

/// What one partition's `flow_take` did: per grant, the task handed out with its ttr
/// deadline (0 when finished at once), or `None`; the pause; what it promoted.
#[derive(Debug)]
struct Took {
    taken: Vec<Option<((u64, Delivery), Millis)>>,
    pause: i64,
    promoted: Events,
}

impl Took {
    fn parse(
        topic: &str,
        payload: &[Value],
        grants: usize,
        what: &str,
    ) -> Result<Took, BackendError> {
        let bad = |detail: &str| BackendError::protocol(what, detail.to_owned());
        let num = |i: usize| payload.get(i).and_then(int);
        let pause = num(0).ok_or_else(|| bad("no pause"))?;
        if num(1) != i64::try_from(grants).ok() {
            return Err(bad("a count of grants other than the grants sent"));
        }
        let mut at = 2;
        let mut taken = Vec::with_capacity(grants);
        for _ in 0..grants {
            if num(at).ok_or_else(|| bad("no outcome of a grant"))? == 0 {
                taken.push(None);
                at += 1;
                continue;
            }
            let values = payload
                .get(at + 1..at + 1 + POP_VALUES)
                .ok_or_else(|| bad("too few values"))?;
            let task = parse_deliveries(topic, values)
                .and_then(|mut d| d.pop())
                .ok_or_else(|| bad("a task with a bad field"))?;
            let deadline = num(at + 1 + POP_VALUES)
                .and_then(|d| u64::try_from(d).ok())
                .ok_or_else(|| bad("no deadline"))?;
            taken.push(Some((task, deadline)));
            at += 2 + POP_VALUES;
        }
        let promoted = Events::parse(&payload[at..]).ok_or_else(|| bad("bad promotions"))?;
        Ok(Took {
            taken,
            pause,
            promoted,
        })
    }
}

/// One partition's share of a pop: the grants to take (id, receipt, until when its permit
/// lasts) and the keys to hold back (key, until when).
type Share = (Vec<(String, String, Millis)>, Vec<(String, Millis)>);

impl InstanceState {
    /// An invocation of the permit script `script` of `topic` with the clock's bounds.
    pub(super) fn permit_invocation<'s>(
        &self,
        script: &'s Script,
        topic: &str,
        now: Millis,
        upper: Millis,
    ) -> ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        for key in self.keys.permits(topic).all() {
            inv.key(key);
        }
        inv.arg(clock_arg(now, upper))
            .arg(&self.channel)
            .arg(&self.instance)
            .arg(topic);
        inv
    }

    /// Runs a permit script of `topic` and acts on what it reports: freed slots of a topic
    /// that was at its `max_active` wake this instance's parked consumers (the script told
    /// the others), and keys with free permits again are let go in their partitions.
    pub(super) async fn run_permit(
        &self,
        what: &str,
        inv: &ScriptInvocation<'_>,
        topic: &str,
    ) -> Result<PermitReply, BackendError> {
        let value = self
            .redis
            .io(what, inv.invoke_async(&mut self.redis.conn()))
            .await?;
        let reply = PermitReply::parse(value, what)?;
        if reply.was_full && reply.freed > 0 {
            self.ctx
                .waiters
                .notify(topic, usize::try_from(reply.freed).unwrap_or(usize::MAX));
        }
        if !reply.unblock.is_empty() {
            self.lift_holds(topic, &reply.unblock).await;
        }
        Ok(reply)
    }

    /// Lets the keys of `unblock` go again in the partitions holding them back. If this
    /// fails, a partition lets a key go by itself once its hold's time passes.
    async fn lift_holds(&self, topic: &str, unblock: &[(String, Vec<u32>)]) {
        let mut by_part: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
        for (key, parts) in unblock {
            for &p in parts {
                by_part.entry(p).or_default().push(key);
            }
        }
        let what = format!("letting keys of topic {topic:?} go again");
        let now = self.ctx.clock.now_ms();
        let keys: Vec<(u32, PartitionKeys)> = by_part
            .keys()
            .map(|&p| (p, self.keys.partition(topic, p)))
            .collect();
        let invs: Vec<ScriptInvocation<'_>> = keys
            .iter()
            .zip(by_part.values())
            .map(|((p, pk), held)| {
                let mut inv = self.invocation(&SCRIPTS.flow_unblock, pk, topic, *p, now);
                inv.arg(held.len());
                for key in held {
                    inv.arg(*key);
                }
                inv
            })
            .collect();
        let results = match self.redis.run_scripts(&what, &invs).await {
            Ok(results) => results,
            Err(e) => {
                tracing::warn!(error = %e, "the keys stay held back until their time passes");
                return;
            }
        };
        for ((p, _), result) in keys.iter().zip(results) {
            match result.and_then(|v| Reply::parse(v, &what)) {
                Ok(reply) => self.effects(topic, *p, &reply),
                Err(e) => {
                    tracing::warn!(error = %e, "the keys stay held back until their time passes")
                }
            }
        }
    }

    /// Gives back the permits of tasks of `topic` that left ACTIVE (the `freed` receipts of
    /// a script's reply). The tasks' own change is done whatever happens here; if this
    /// fails, the permits last until their time passes, which is logged.
    pub(crate) async fn free_permits(&self, topic: &str, receipts: &[String]) {
        if receipts.is_empty() {
            return;
        }
        if let Err(e) = self.release_permits(topic, 0, &[], receipts).await {
            tracing::warn!(
                error = %e,
                topic,
                "permits stay held until their tasks' ttr passes"
            );
        }
    }

    /// `permit_release`: gives `refund` tokens back to the rate, settles `settle` (receipt,
    /// ttr deadline) and gives back `free`.
    async fn release_permits(
        &self,
        topic: &str,
        refund: usize,
        settle: &[(String, Millis)],
        free: &[String],
    ) -> Result<(), BackendError> {
        let what = format!("giving back permits of topic {topic:?}");
        let now = self.ctx.clock.now_ms();
        let upper = self.ctx.clock.window_start(now);
        let mut inv = self.permit_invocation(&SCRIPTS.permit_release, topic, now, upper);
        inv.arg(refund).arg(settle.len());
        for (r, deadline) in settle {
            inv.arg(r).arg(*deadline);
        }
        inv.arg(free.len());
        for r in free {
            inv.arg(r);
        }
        self.run_permit(&what, &inv, topic).await.map(drop)
    }

    /// Holds the permit `receipt` (of a task of `key`, `""` none) until `until`: longer, for
    /// a touch; or new, for a task that became ACTIVE outside a pop (`force`: whatever the
    /// limits say). Returns whether it is held.
    pub(super) async fn hold_permit(
        &self,
        topic: &str,
        receipt: &str,
        key: &str,
        until: Millis,
        force: bool,
    ) -> Result<bool, BackendError> {
        let what = format!("holding a permit of topic {topic:?}");
        let now = self.ctx.clock.now_ms();
        let upper = self.ctx.clock.window_start(now);
        let mut inv = self.permit_invocation(&SCRIPTS.permit_hold, topic, now, upper);
        inv.arg(receipt)
            .arg(key)
            .arg(until)
            .arg(if force { "1" } else { "0" });
        let mark = self.redis.mark();
        let reply = self.run_permit(&what, &inv, topic).await?;
        self.redis
            .replicated(&what, [self.keys.permits(topic).base.as_str()], mark)
            .await?;
        Ok(reply.payload.first().and_then(int) == Some(1))
    }

    /// Sets the limits the permits of `topic` count against (`spec` as a partition's, see
    /// `limits.lua`), or with `""` removes them and every permit.
    pub(super) async fn set_permit_limits(
        &self,
        topic: &str,
        spec: &str,
    ) -> Result<(), BackendError> {
        let what = format!("setting the permits' limits of topic {topic:?}");
        let now = self.ctx.clock.now_ms();
        let mut inv = self.permit_invocation(&SCRIPTS.permit_limits, topic, now, now);
        inv.arg(spec);
        let mark = self.redis.mark();
        self.run_permit(&what, &inv, topic).await?;
        self.redis
            .replicated(&what, [self.keys.permits(topic).base.as_str()], mark)
            .await
    }

    /// What the permits of `topic` hold back now: whether it is at its `max_active`, and
    /// whether its rate has no token.
    pub(super) async fn permit_stats(&self, topic: &str) -> Result<(bool, bool), BackendError> {
        let what = format!("reading the permits of topic {topic:?}");
        let now = self.ctx.clock.now_ms();
        let upper = self.ctx.clock.window_start(now);
        let inv = self.permit_invocation(&SCRIPTS.permit_stats, topic, now, upper);
        let reply = self.run_permit(&what, &inv, topic).await?;
        let flag = |i: usize| reply.payload.get(i).and_then(int) == Some(1);
        Ok((flag(1), flag(2)))
    }

    /// Takes up to `want` of `candidates` (of one topic whose limits are topic-wide, in pop
    /// order) as its permits allow (the module doc). Returns the tasks taken with their
    /// insertion numbers, whether more may go now (grants went to faster consumers, or keys
    /// were held back before `want` was reached: another round finds what is behind them),
    /// and whether the topic's `max_active` or rate let no more go.
    pub(super) async fn pop_wide(
        &self,
        topic: &str,
        candidates: &[&Candidate<'_>],
        want: usize,
        auto_finish: bool,
        now: Millis,
    ) -> Result<(Vec<(u64, Delivery)>, bool, bool), BackendError> {
        let candidates = &candidates[..candidates.len().min(MOST_CANDIDATES)];
        let upper = self.ctx.clock.window_start(now);
        let prefix = self.receipts.prefix();
        let receipts: Vec<String> = (1..=candidates.len())
            .map(|i| format!("{prefix}{i:04x}"))
            .collect();
        let what = format!("asking for permits to pop tasks of topic {topic:?}");
        let mut inv = self.permit_invocation(&SCRIPTS.permit_grant, topic, now, upper);
        inv.arg(GRANT_GRACE_MS)
            .arg(if auto_finish { "1" } else { "0" })
            .arg(want)
            .arg(KEY_HOLD_MS)
            .arg(candidates.len());
        for (c, r) in candidates.iter().zip(&receipts) {
            let (key, ttr) = c.permit.as_ref().map_or(("", 0), |(k, t)| (k.as_str(), *t));
            inv.arg(r).arg(key).arg(ttr).arg(c.part.1);
        }
        let mark = self.redis.mark();
        let reply = self.run_permit(&what, &inv, topic).await?;
        let grants = Grants::parse(&reply.payload, candidates.len(), &what)?;
        if grants.granted.iter().any(|g| *g) {
            self.redis
                .replicated(&what, [self.keys.permits(topic).base.as_str()], mark)
                .await?;
        }
        if let Some(at) = grants.next_at {
            // The limits stopped the grants: parked consumers try again when they let the
            // next task go (a slot's ttr, the rate's next token), or when a slot frees.
            self.wake_at_pause_end(topic, i64::try_from(at).unwrap_or(i64::MAX));
        }
        // Each partition's share: its grants and its keys to hold back.
        let mut shares: BTreeMap<u32, Share> = BTreeMap::new();
        for ((c, r), _) in candidates
            .iter()
            .zip(&receipts)
            .zip(&grants.granted)
            .filter(|(_, g)| **g)
        {
            let ttr = c.permit.as_ref().map_or(0, |(_, t)| *t);
            let until = upper + ttr + GRANT_GRACE_MS;
            let share = shares.entry(c.part.1).or_default();
            share.0.push((c.id.clone(), r.clone(), until));
        }
        for (key, p, until) in &grants.holds {
            shares.entry(*p).or_default().1.push((key.clone(), *until));
        }
        let stopped = grants.next_at.is_some();
        if shares.is_empty() {
            return Ok((Vec::new(), false, stopped));
        }
        let granted = grants.granted.iter().filter(|g| **g).count();
        let held_some = !grants.holds.is_empty();
        let (taken, settle, unused) = self.take_granted(topic, &shares, auto_finish, now).await?;
        // Tokens of grants not handed out go back; so do their permits, and the permits of
        // the tasks taken are cut to their ttr deadlines.
        if let Err(e) = self
            .release_permits(topic, unused.len(), &settle, &unused)
            .await
        {
            tracing::warn!(
                error = %e,
                topic,
                "permits stay held until their time passes"
            );
        }
        let more = !stopped && (taken.len() < granted || (held_some && taken.len() < want));
        Ok((taken, more, stopped))
    }

    /// Runs `flow_take` on each partition of `shares`. Returns the tasks taken, the permits to
    /// settle (receipt, deadline) and the receipts of grants not taken. A partition whose
    /// script failed may have handed its grants out: their permits are left to their time.
    async fn take_granted(
        &self,
        topic: &str,
        shares: &BTreeMap<u32, Share>,
        auto_finish: bool,
        now: Millis,
    ) -> Result<(Vec<(u64, Delivery)>, Vec<(String, Millis)>, Vec<String>), BackendError> {
        let what = format!("popping tasks of topic {topic:?} with their permits");
        let keys: Vec<(u32, PartitionKeys)> = shares
            .keys()
            .map(|&p| (p, self.keys.partition(topic, p)))
            .collect();
        let promote = self.options.promote_batch.to_string();
        let invs: Vec<ScriptInvocation<'_>> = keys
            .iter()
            .zip(shares.values())
            .map(|((p, pk), (grants, holds))| {
                let mut inv = self.invocation(&SCRIPTS.flow_take, pk, topic, *p, now);
                inv.arg(&promote)
                    .arg(if auto_finish { "1" } else { "0" })
                    .arg(grants.len());
                for (id, receipt, until) in grants {
                    inv.arg(id).arg(receipt).arg(*until);
                }
                inv.arg(holds.len());
                for (key, until) in holds {
                    inv.arg(key).arg(*until);
                }
                inv
            })
            .collect();
        let results = self.redis.run_scripts(&what, &invs).await?;
        let (mut taken, mut settle, mut unused) = (Vec::new(), Vec::new(), Vec::new());
        let mut first_error = None;
        for (((p, _), (grants, _)), result) in keys.iter().zip(shares.values()).zip(results) {
            let took = result
                .and_then(|v| Reply::parse(v, &what))
                .and_then(|reply| {
                    self.effects(topic, *p, &reply);
                    Took::parse(topic, &reply.payload, grants.len(), &what)
                });
            let took = match took {
                Ok(took) => took,
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            self.wake_at_pause_end(topic, took.pause);
            self.record_events(topic, &took.promoted, now);
            for ((_, receipt, _), t) in grants.iter().zip(took.taken) {
                match t {
                    Some((task, deadline)) => {
                        if !auto_finish {
                            settle.push((receipt.clone(), deadline));
                        }
                        taken.push(task);
                    }
                    None => unused.push(receipt.clone()),
                }
            }
        }
        match first_error {
            Some(e) if taken.is_empty() => Err(e),
            _ => Ok((taken, settle, unused)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn permit_replies_parse() {
        let reply = Value::Array(vec![
            Value::Int(2),
            Value::Int(1),
            Value::Int(1),
            bulk("merchant-1"),
            bulk("0,3"),
            Value::Int(7),
        ]);
        let r = PermitReply::parse(reply, "testing").unwrap();
        assert_eq!((r.freed, r.was_full), (2, true));
        assert_eq!(r.unblock, vec![("merchant-1".to_owned(), vec![0, 3])]);
        assert_eq!(r.payload, vec![Value::Int(7)]);
        let bad = Value::Array(vec![Value::Int(0), Value::Int(0), Value::Int(1), bulk("k")]);
        assert!(PermitReply::parse(bad, "testing").is_err());
        let bad_part = Value::Array(vec![
            Value::Int(0),
            Value::Int(0),
            Value::Int(1),
            bulk("k"),
            bulk("1,x"),
        ]);
        assert!(PermitReply::parse(bad_part, "testing").is_err());
    }

    #[test]
    fn grants_parse() {
        let payload = [
            Value::Int(-1),
            Value::Int(3),
            Value::Int(1),
            Value::Int(0),
            Value::Int(1),
            Value::Int(1),
            bulk("merchant-1"),
            Value::Int(2),
            Value::Int(5_000),
        ];
        let g = Grants::parse(&payload, 3, "testing").unwrap();
        assert_eq!(
            g,
            Grants {
                granted: vec![true, false, true],
                holds: vec![("merchant-1".to_owned(), 2, 5_000)],
                next_at: None,
            }
        );
        assert!(Grants::parse(&payload, 2, "testing").is_err());
        assert!(Grants::parse(&payload[..8], 3, "testing").is_err());
        let stopped = [Value::Int(1_234), Value::Int(0), Value::Int(0)];
        assert_eq!(
            Grants::parse(&stopped, 0, "testing").unwrap().next_at,
            Some(1_234)
        );
    }

    #[test]
    fn takes_parse() {
        let mut payload = vec![Value::Int(-2), Value::Int(2), Value::Int(0), Value::Int(1)];
        payload.extend([
            bulk("a"),
            bulk("body"),
            bulk("0"),
            bulk("00000000000a0001"),
            bulk("1000"),
            bulk("30000"),
            Value::Int(7),
            bulk("0000000000000005"),
            bulk(""),
            bulk(""),
            Value::Int(31_000),
        ]);
        payload.extend([Value::Int(1), Value::Int(990)]);
        let took = Took::parse("t", &payload, 2, "testing").unwrap();
        assert!(took.taken[0].is_none());
        let ((seq, d), deadline) = took.taken[1].as_ref().unwrap();
        assert_eq!((*seq, d.id.as_str(), *deadline), (5, "a", 31_000));
        assert_eq!(took.promoted.dues, vec![990]);
        assert!(Took::parse("t", &payload, 3, "testing").is_err());
        assert!(Took::parse("t", &payload[..8], 2, "testing").is_err());
    }
}
