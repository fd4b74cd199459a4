//! One shard of the engine: the records of the topics that hash to it, their per-state
//! orderings and one timing wheel for every time-driven change.
//!
//! A shard is plain synchronous state behind one mutex; every method takes `now` and applies
//! one operation completely, asking [`delayq_core::lifecycle`] what the operation does. Each
//! record has at most one timer of its own in the wheel, whose meaning depends on its state:
//!
//! | state               | timer at                 | when it fires                |
//! |---------------------|--------------------------|------------------------------|
//! | DELAYED             | none (its topic's timer), or its expiry if before its due | expired |
//! | READY with expiry   | expiry                   | expired: DEAD or deleted     |
//! | ACTIVE              | ttr deadline             | a failure: READY/DELAYED/DEAD |
//! | FINISHED, CANCELLED | end of retention         | the record is removed        |
//! | READY without expiry, DEAD | none              |                              |
//!
//! DELAYED tasks are the bulk of a queue, and their topic's DELAYED ordering (below) already
//! holds them by due, so they are not in the wheel one by one: each topic with DELAYED tasks
//! has one timer, armed at (or before) its earliest due. When it fires, the topic's due tasks
//! become READY from the front of the ordering (or expire, if their expiry has passed too),
//! and the timer is armed again at the next due. An add or a change that puts a task in front
//! moves the timer earlier; a removal leaves it where it is, and a timer that fires with
//! nothing due only arms itself again. So the wheel holds one entry per topic instead of one
//! per delayed task (32 bytes and its share of the wheel's growth, docs/design.md §6), and
//! promotion walks one ordering instead of keeping two.
//!
//! A task's expiry (docs/design.md §11) thus fires at its instant whether or not anyone pops,
//! and a pop also checks the head it takes, so a task is never handed out at or after its
//! expiry even before its timer ran. An ACTIVE task's expiry waits: it applies when the task
//! comes back (release, ttr expiry).
//!
//! Per topic, every state has an ordered set ([`DueSet`]) of (due, insertion, record) keys
//! ([`Record::due_key`]): DELAYED's gives `next_due_ms` and
//! kick's earliest-due-first order, all of them give `list` its due order, and the sizes are
//! the stats counters, so stats never scan. Two more orderings hold what pops and peeks need:
//! READY by (priority, due, insertion) — the pop order of docs/design.md §2 rule 11 — and
//! DEAD by (when buried, insertion) — the order of kick and peek-buried. Insertion is a
//! sequence number every record gets when it is added, from a counter shared by the shards of
//! one engine, so that a pop over topics of several shards compares heads in one order.
//!
//! A topic also carries its pause (rule 14): a paused topic takes adds and promotes due tasks,
//! but pops give nothing until the pause ends (at its end, computed at read, or on resume).
//! Shard 0 also holds the job id counter of the whole engine. The settings store is not in a
//! shard (see `settings.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::due_set::DueSet;
use super::slab::ChunkedSlab;
use delayq_core::flow::take;
use delayq_core::lifecycle::{self, AfterFailure, Op};
use delayq_core::wheel::{Expired, TimerKey, Wheel};
use delayq_core::{
    AddOutcome, BuryOptions, Delivery, EXPIRED, FlowLimits, HeldBack, Millis, OnDuplicate,
    OnExpire, Page, Pause, State, TaskDefaults, TaskInfo, TaskSpec, TopicStats,
};
use hashbrown::{DefaultHashBuilder, HashMap, HashTable};
use std::hash::BuildHasher;

use super::Journal;
use super::flow::Flow;
use super::record::{
    Extra, MAX_ID_BYTES, Record, RecordFields, SEQ_MAX, due_of_key, mix_receipt, slot_of_key,
};
use crate::error::{Error, Result};
use crate::metrics::{Metrics, TopicCounters};
use crate::storage::ReleaseOptions;

/// The tasks of one topic inside a shard.
#[derive(Debug)]
struct Topic {
    name: Arc<str>,
    /// Record indices, hashed by the record's id (the id string is stored once, in the record).
    ids: HashTable<u32>,
    /// Per state, [`Record::due_key`]s: due order, ties by insertion.
    by_state: [DueSet<(u64, u64)>; 6],
    /// READY records in pop order: ([`Record::ready_key`], record).
    ready: BTreeSet<(u64, u64, u32)>,
    /// DEAD records, oldest buried first: ([`Record::dead_key`], record).
    dead: BTreeSet<(u64, u64, u32)>,
    /// The topic's pause as set; [`Pause::at`] says whether it still holds.
    pause: Pause,
    /// The topic's activity counters, found once when the topic is first seen.
    activity: Arc<TopicCounters>,
    /// Tasks of the topic that expired since the process started (the `expired` of stats).
    expired: u64,
    /// The topic's limits and their state, when it has limits (docs/design.md §11).
    flow: Option<Box<Flow>>,
    /// The wheel's timer for the topic's DELAYED ordering and the instant it is armed at: at
    /// or before the earliest due in `by_state[DELAYED]` (removals leave it early, see the
    /// module doc).
    delayed_timer: Option<(TimerKey, Millis)>,
}

/// What a timer in the shard's wheel stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// A record's own timer (the table in the module doc).
    Record(u32),
    /// The DELAYED ordering of the topic with this index: its due tasks become READY.
    Delayed(u32),
}

impl Topic {
    fn stats(&self, now: Millis) -> TopicStats {
        let mut stats = TopicStats::default();
        for state in State::ALL {
            let n = self.by_state[state as usize].len() as i64;
            stats.adjust(state, n);
        }
        stats.next_due_ms = self.by_state[State::Delayed as usize]
            .first()
            .map(|&k| due_of_key(k));
        stats.pause = self.pause.at(now);
        stats.expired = self.expired;
        stats.held_back = self.held_back(now);
        stats
    }

    /// The READY tasks a pop could not take at `now` because of the topic's limits.
    fn held_back(&self, now: Millis) -> HeldBack {
        let mut held = HeldBack::default();
        let Some(flow) = self.flow.as_deref() else {
            return held;
        };
        let ready = self.by_state[State::Ready as usize].len() as u64;
        let active = self.by_state[State::Active as usize].len();
        if flow.limits.max_active.is_some_and(|m| active >= m as usize) {
            held.max_active = ready;
        } else if flow.rate.is_some_and(|r| take(r, flow.tat, now, 1).n == 0) {
            held.rate = ready;
        } else {
            held.key = flow.held_by_keys();
        }
        held
    }

    /// How many of `want` tasks the topic's limits let a pop hand out at `now`, and when the
    /// rate lets the next one go if it lets none.
    fn allowance(&self, now: Millis, want: usize) -> (usize, Option<Millis>) {
        let Some(flow) = self.flow.as_deref() else {
            return (want, None);
        };
        let mut n = want;
        if let Some(max) = flow.limits.max_active {
            let active = self.by_state[State::Active as usize].len();
            n = n.min((max as usize).saturating_sub(active));
        }
        match flow.rate {
            Some(rate) if n > 0 => {
                let got = take(rate, flow.tat, now, n.min(u32::MAX as usize) as u32);
                (got.n as usize, got.next_at)
            }
            _ => (n, None),
        }
    }

    fn total(&self) -> usize {
        self.by_state.iter().map(DueSet::len).sum()
    }
}

/// One shard's state. See the module doc.
pub(crate) struct Shard<J> {
    records: ChunkedSlab<Record>,
    topics: Vec<Topic>,
    topic_index: HashMap<Arc<str>, u32>,
    wheel: Wheel<Timer>,
    hasher: DefaultHashBuilder,
    receipt_counter: u64,
    defaults: TaskDefaults,
    max_error_bytes: usize,
    metrics: Arc<Metrics>,
    /// The instant the driver sleeps until; an earlier timer must wake it.
    armed_until: Millis,
    /// Set when a timer earlier than `armed_until` was armed.
    wake_driver: bool,
    /// Topics that got ready tasks during the current operation, one entry per task (or
    /// whose limits let a task go again).
    became_ready: Vec<Arc<str>>,
    /// Rate-limited topics with READY tasks, and when their rate lets the next one go.
    rate_wakes: Vec<(Arc<str>, Millis)>,
    /// The insertion sequence counter (the next value), shared by the engine's shards.
    seq: Arc<AtomicU64>,
    /// Shard 0 only: the next job id to hand out.
    job_next: u64,
    /// Shard 0 only: the highest job id logged as reserved; ids up to it may be in use.
    job_reserved: u64,
    /// Shard 0 only: the highest reservation known to be durable.
    job_durable: u64,
    /// Recovery only: how many records it expects to restore (a hint, 0: none), and how many
    /// it has restored so far; see [`Shard::restore_expect`].
    restore_expected: u64,
    restored: u64,
    /// The durability hook.
    pub(crate) journal: J,
}

/// How many job ids one logged reservation covers: a log record per 1 024 ids, and after a
/// crash the counter resumes past the whole block (ids skip, never repeat).
pub(crate) const JOB_ID_BLOCK: u64 = 1_024;

impl<J: Journal> Shard<J> {
    /// An empty shard whose wheel starts at `now`. `seed` makes receipts differ between shards
    /// and runs.
    pub fn new(
        now: Millis,
        seed: u64,
        defaults: TaskDefaults,
        max_error_bytes: usize,
        metrics: Arc<Metrics>,
        journal: J,
    ) -> Self {
        Shard {
            records: ChunkedSlab::new(),
            topics: Vec::new(),
            topic_index: HashMap::new(),
            wheel: Wheel::new(now),
            hasher: DefaultHashBuilder::default(),
            receipt_counter: seed,
            defaults,
            max_error_bytes,
            metrics,
            armed_until: Millis::MAX,
            wake_driver: false,
            became_ready: Vec::new(),
            rate_wakes: Vec::new(),
            seq: Arc::new(AtomicU64::new(1)),
            job_next: 1,
            job_reserved: 0,
            job_durable: 0,
            restore_expected: 0,
            restored: 0,
            journal,
        }
    }

    /// The same shard with another journal: recovery replays into a shard without one, then
    /// attaches the log it replayed from.
    pub fn with_journal<K: Journal>(self, journal: K) -> Shard<K> {
        Shard {
            records: self.records,
            topics: self.topics,
            topic_index: self.topic_index,
            wheel: self.wheel,
            hasher: self.hasher,
            receipt_counter: self.receipt_counter,
            defaults: self.defaults,
            max_error_bytes: self.max_error_bytes,
            metrics: self.metrics,
            armed_until: self.armed_until,
            wake_driver: self.wake_driver,
            became_ready: self.became_ready,
            rate_wakes: self.rate_wakes,
            seq: self.seq,
            job_next: self.job_next,
            job_reserved: self.job_reserved,
            job_durable: self.job_durable,
            restore_expected: self.restore_expected,
            restored: self.restored,
            journal,
        }
    }

    /// The next insertion sequence this shard would hand out.
    pub fn seq_next(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Makes this shard draw insertion sequences from `seq` (the engine's shared counter).
    pub fn share_seq(&mut self, seq: Arc<AtomicU64>) {
        self.seq = seq;
    }

    fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::AcqRel)
    }

    // ---- bookkeeping ------------------------------------------------------------------

    fn topic_idx(&self, name: &str) -> Option<u32> {
        self.topic_index.get(name).copied()
    }

    fn topic_idx_or_create(&mut self, name: &str) -> u32 {
        if let Some(i) = self.topic_idx(name) {
            return i;
        }
        let name: Arc<str> = Arc::from(name);
        let idx = self.topics.len() as u32;
        self.topics.push(Topic {
            name: Arc::clone(&name),
            ids: HashTable::new(),
            by_state: Default::default(),
            ready: BTreeSet::new(),
            dead: BTreeSet::new(),
            pause: Pause::default(),
            activity: self.metrics.topic(&name),
            expired: 0,
            flow: None,
            delayed_timer: None,
        });
        self.topic_index.insert(name, idx);
        idx
    }

    fn find(&self, topic: &str, id: &str) -> Option<u32> {
        let t = self.topic_idx(topic)?;
        self.find_hashed(t, self.hasher.hash_one(id.as_bytes()), id.as_bytes())
    }

    /// The record of topic `t` whose id is `id`, whose hash is `hash`.
    fn find_hashed(&self, t: u32, hash: u64, id: &[u8]) -> Option<u32> {
        self.topics[t as usize]
            .ids
            .find(hash, |&r| self.records[r as usize].id_bytes() == id)
            .copied()
    }

    fn find_or_404(&self, topic: &str, id: &str) -> Result<u32> {
        self.find(topic, id)
            .ok_or_else(|| Error::not_found(topic, id))
    }

    fn topic_name(&self, idx: u32) -> &Arc<str> {
        &self.topics[self.records[idx as usize].topic as usize].name
    }

    fn unlink(&mut self, idx: u32) {
        let r = &self.records[idx as usize];
        let t = &mut self.topics[r.topic as usize];
        t.by_state[r.state as usize].remove(&r.due_key(idx));
        match r.state {
            State::Ready => {
                let (a, b) = r.ready_key();
                match (t.flow.as_deref_mut(), r.key()) {
                    (Some(flow), Some(key)) => flow.leave_ready(key, (a, b, idx), &mut t.ready),
                    _ => {
                        t.ready.remove(&(a, b, idx));
                    }
                }
            }
            State::Active => {
                if let Some(flow) = t.flow.as_deref_mut() {
                    let key_back = r.key().is_some_and(|k| flow.leave_active(k, &mut t.ready));
                    // (ACTIVE's count is already one less.)
                    let was_full = flow.limits.max_active.is_some_and(|max| {
                        t.by_state[State::Active as usize].len() + 1 >= max as usize
                    });
                    // A slot freed where one was missing: a consumer held back may go on.
                    // Below the limits nobody waits for a slot, so this wakes nobody then.
                    if (key_back || was_full) && !t.ready.is_empty() {
                        self.became_ready.push(Arc::clone(&t.name));
                    }
                }
            }
            State::Dead => {
                let (a, b) = r.dead_key();
                t.dead.remove(&(a, b, idx));
            }
            _ => {}
        }
    }

    fn link(&mut self, idx: u32) {
        let r = &self.records[idx as usize];
        if r.state == State::Ready {
            self.became_ready
                .push(Arc::clone(&self.topics[r.topic as usize].name));
        }
        if r.state == State::Delayed {
            let (topic, due) = (r.topic, r.due_ms);
            self.arm_delayed(topic, due);
        }
        let r = &self.records[idx as usize];
        let t = &mut self.topics[r.topic as usize];
        t.by_state[r.state as usize].insert(r.due_key(idx));
        match r.state {
            State::Ready => {
                let (a, b) = r.ready_key();
                match (t.flow.as_deref_mut(), r.key()) {
                    (Some(flow), Some(key)) => flow.enter_ready(key, (a, b, idx), &mut t.ready),
                    _ => {
                        t.ready.insert((a, b, idx));
                    }
                }
            }
            State::Active => {
                if let (Some(flow), Some(key)) = (t.flow.as_deref_mut(), r.key()) {
                    flow.enter_active(key, &mut t.ready);
                }
            }
            State::Dead => {
                let (a, b) = r.dead_key();
                t.dead.insert((a, b, idx));
            }
            _ => {}
        }
    }

    fn disarm(&mut self, idx: u32) {
        if let Some(key) = self.records[idx as usize].take_timer() {
            self.wheel.remove(key);
        }
    }

    fn arm(&mut self, idx: u32, at: Millis) {
        self.disarm(idx);
        let key = self.wheel.insert(at, Timer::Record(idx));
        self.records[idx as usize].set_timer(key);
        self.note_armed(at);
    }

    /// Makes sure topic `t`'s DELAYED timer fires at `due` at the latest.
    fn arm_delayed(&mut self, t: u32, due: Millis) {
        let topic = &mut self.topics[t as usize];
        let key = match topic.delayed_timer {
            Some((_, at)) if at <= due => return,
            Some((key, _)) if self.wheel.reschedule(key, due) => key,
            _ => self.wheel.insert(due, Timer::Delayed(t)),
        };
        topic.delayed_timer = Some((key, due));
        self.note_armed(due);
    }

    /// A timer at `at` was armed: the driver must wake if it sleeps past it.
    fn note_armed(&mut self, at: Millis) {
        if at < self.armed_until {
            self.armed_until = at;
            self.wake_driver = true;
        }
    }

    /// Moves a record to `state`, keeping orderings and timers right. `due` changes the due
    /// time at the same time (it is part of the ordering key).
    fn transition(&mut self, idx: u32, state: State, due: Millis, now: Millis) {
        self.unlink(idx);
        self.enter(idx, state, due, now);
    }

    /// Puts a record that is in no ordering into `state`: fields, timer, ordering.
    fn enter(&mut self, idx: u32, state: State, due: Millis, now: Millis) {
        let retention = self.defaults.retention_ms;
        let r = &mut self.records[idx as usize];
        r.state = state;
        r.due_ms = due;
        r.set_updated_at_ms(now);
        match state {
            State::Active => {}
            State::Finished | State::Cancelled => r.set_deadline_ms(now.saturating_add(retention)),
            State::Delayed | State::Ready | State::Dead => r.set_deadline_ms(0),
        }
        if state != State::Active {
            r.set_receipt(0);
        }
        match timer_at(r) {
            Some(at) => self.arm(idx, at),
            None => self.disarm(idx),
        }
        self.link(idx);
    }

    fn remove_record(&mut self, idx: u32) -> Record {
        self.unlink(idx);
        self.disarm(idx);
        let r = self.records.remove(idx as usize);
        let hash = self.hasher.hash_one(r.id_bytes());
        let t = &mut self.topics[r.topic as usize];
        if let Ok(entry) = t.ids.find_entry(hash, |&i| i == idx) {
            entry.remove();
        }
        r
    }

    fn journal_put(&mut self, idx: u32) {
        let r = &self.records[idx as usize];
        let topic = &self.topics[r.topic as usize].name;
        self.journal.put(topic, r);
    }

    fn next_receipt(&mut self) -> u64 {
        self.receipt_counter = self.receipt_counter.wrapping_add(1);
        mix_receipt(self.receipt_counter)
    }

    fn check(&self, idx: u32, op: Op, receipt: Option<&str>) -> Result<()> {
        let r = &self.records[idx as usize];
        let refuse = |refusal| Error::conflict(self.topic_name(idx), r.id(), refusal);
        lifecycle::check_op(r.state, op).map_err(refuse)?;
        if r.state == State::Active {
            lifecycle::check_receipt(&r.receipt_text(), receipt).map_err(refuse)?;
        }
        Ok(())
    }

    // ---- what the driver and the engine read ----------------------------------------

    /// Takes the topics that got ready tasks since the last call, one entry per task.
    pub fn take_became_ready(&mut self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.became_ready)
    }

    /// Whether the driver must wake up to re-arm for an earlier timer; clears the flag.
    pub fn take_wake_driver(&mut self) -> bool {
        std::mem::take(&mut self.wake_driver)
    }

    /// The earliest instant the wheel may have work, recorded as the driver's sleep target.
    pub fn arm_driver(&mut self) -> Option<Millis> {
        let next = self.wheel.next_expiration();
        self.armed_until = next.unwrap_or(Millis::MAX);
        next
    }

    /// The number of records.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    // ---- operations --------------------------------------------------------------------

    /// Adds one validated task.
    pub fn add(&mut self, spec: TaskSpec, now: Millis) -> Result<AddOutcome> {
        // Before anything changes, so that a refused add replaces nothing.
        let (data, id_last) = Record::pack(&spec.id, &spec.body)
            .map_err(|_| Error::invalid("id", format!("must be 1 to {MAX_ID_BYTES} bytes")))?;
        let outcome = match self.find(&spec.topic, &spec.id) {
            Some(existing) => match spec.on_duplicate {
                OnDuplicate::Keep => return Ok(AddOutcome::Existed),
                OnDuplicate::Replace => {
                    self.remove_record(existing);
                    AddOutcome::Replaced
                }
                OnDuplicate::Reject => {
                    return Err(Error::Duplicate {
                        topic: spec.topic,
                        id: spec.id,
                    });
                }
            },
            None => AddOutcome::Added,
        };
        let topic = self.topic_idx_or_create(&spec.topic);
        let state = lifecycle::scheduled_state(spec.due_ms, now);
        let mut record = Record::new(RecordFields {
            topic,
            data,
            id_last,
            priority: spec.priority,
            seq: 0,
            // Linked below through `transition`, which sets the real state.
            state,
            retries: 0,
            ttr_ms: spec.ttr_ms,
            max_retries: spec.max_retries,
            due_ms: spec.due_ms,
            created_at_ms: spec.created_at_ms,
            updated_at_ms: now,
            deadline_ms: 0,
            receipt: 0,
            key: spec.key.map(String::into_boxed_str),
            extra: (spec.backoff.is_some() || spec.trace.is_some() || spec.expires_at_ms.is_some())
                .then(|| {
                    Box::new(Extra {
                        backoff: spec.backoff,
                        trace: spec.trace,
                        expires_at_ms: spec.expires_at_ms,
                        on_expire: spec.on_expire,
                        ..Extra::default()
                    })
                }),
        });
        record.set_seq(self.next_seq());
        self.insert_record(record, now);
        Ok(outcome)
    }

    /// Inserts a record in its own state (add, replace and recovery), arming its timer.
    fn insert_record(&mut self, record: Record, now: Millis) -> u32 {
        let idx = self.records.insert(record) as u32;
        let r = &self.records[idx as usize];
        let (topic, hash) = (r.topic, self.hasher.hash_one(r.id_bytes()));
        let records = &self.records;
        let hasher = &self.hasher;
        self.topics[topic as usize]
            .ids
            .insert_unique(hash, idx, |&i| {
                hasher.hash_one(records[i as usize].id_bytes())
            });
        let (state, due) = (r.state, r.due_ms);
        self.enter(idx, state, due, now);
        self.journal_put(idx);
        idx
    }

    /// Takes up to `max` ready tasks of `topic` in pop order (priority, due, insertion);
    /// nothing while the topic is paused.
    pub fn pop(
        &mut self,
        topic: &str,
        max: usize,
        auto_finish: bool,
        now: Millis,
    ) -> Vec<Delivery> {
        self.pop_any(&[topic], max, auto_finish, now)
    }

    /// The READY head of `topic` that a pop would take at `now` (none while paused or held
    /// back by the topic's limits), by its
    /// [`Record::ready_key`].
    pub fn head(&self, topic: &str, now: Millis) -> Option<(u64, u64)> {
        let t = &self.topics[self.topic_idx(topic)? as usize];
        if t.pause.holds(now) || t.allowance(now, 1).0 == 0 {
            return None;
        }
        t.ready.first().map(|&(a, b, _)| (a, b))
    }

    /// Takes up to `max` ready tasks over `topics` (all of this shard), best head first each
    /// time: one pop order across them (beanstalkd's watch list).
    pub fn pop_any(
        &mut self,
        topics: &[&str],
        max: usize,
        auto_finish: bool,
        now: Millis,
    ) -> Vec<Delivery> {
        let mut live: Vec<u32> = topics
            .iter()
            .filter_map(|name| self.topic_idx(name))
            .filter(|&t| !self.topics[t as usize].pause.holds(now))
            .collect();
        live.sort_unstable();
        live.dedup();
        // What each topic's limits let go (docs/design.md §11), and what went.
        let mut allowed: Vec<(u32, usize, usize)> = live
            .iter()
            .map(|&t| (t, self.topics[t as usize].allowance(now, max).0, 0))
            .collect();
        let mut out = Vec::with_capacity(max.min(64));
        while out.len() < max {
            let Some((t, idx)) = allowed
                .iter()
                .filter(|&&(_, room, _)| room > 0)
                .filter_map(|&(t, _, _)| self.topics[t as usize].ready.first().map(|h| (*h, t)))
                .min()
                .map(|((_, _, idx), t)| (t, idx))
            else {
                break;
            };
            if lifecycle::is_expired(self.records[idx as usize].expires_at_ms(), now) {
                // Its timer has not run yet (it fires at the same instant): never hand it out.
                self.expire(idx, now);
                continue;
            }
            let due = self.records[idx as usize].due_ms;
            let receipt = self.next_receipt();
            let r = &mut self.records[idx as usize];
            r.set_receipt(receipt);
            r.set_deadline_ms(now.saturating_add(r.ttr_ms()));
            self.transition(idx, State::Active, due, now);
            let name = Arc::clone(&self.topics[t as usize].name);
            out.push(self.records[idx as usize].delivery(&name));
            if auto_finish {
                self.transition(idx, State::Finished, due, now);
            }
            self.journal_put(idx);
            if let Some(a) = allowed.iter_mut().find(|a| a.0 == t) {
                a.1 -= 1;
                a.2 += 1;
            }
        }
        for (t, _, went) in allowed {
            self.spend_rate(t, now, went);
        }
        out
    }

    /// Moves a rate-limited topic's bucket on by the `went` tasks it handed out, and when it
    /// still has READY tasks it may not hand out now, asks for a wake-up when it may.
    fn spend_rate(&mut self, t: u32, now: Millis, went: usize) {
        let topic = &mut self.topics[t as usize];
        let Some(flow) = topic.flow.as_deref_mut() else {
            return;
        };
        let Some(rate) = flow.rate else { return };
        if went > 0 {
            flow.tat = take(rate, flow.tat, now, went.min(u32::MAX as usize) as u32).tat;
        }
        if !topic.ready.is_empty()
            && let Some(at) = take(rate, flow.tat, now, 1).next_at
        {
            self.rate_wakes.push((Arc::clone(&topic.name), at));
        }
    }

    /// Sets or (with `None`) removes the limits of `topic`, rebuilding its pop order under
    /// them (the invariant of [`super::flow`]); the rate bucket carries over.
    pub fn set_flow(&mut self, topic: &str, limits: Option<FlowLimits>) {
        let t = match limits {
            Some(_) => self.topic_idx_or_create(topic),
            None => match self.topic_idx(topic) {
                Some(t) => t,
                None => return,
            },
        } as usize;
        let records = &self.records;
        let topic = &mut self.topics[t];
        let tat = topic.flow.as_ref().map_or(0.0, |f| f.tat);
        topic.flow = limits.map(|l| Box::new(Flow::new(l, tat)));
        topic.ready.clear();
        // ACTIVE first, so that each key's count is known when its READY tasks come in.
        for state in [State::Active, State::Ready] {
            for &idx in topic.ids.iter() {
                let r = &records[idx as usize];
                if r.state != state {
                    continue;
                }
                let (a, b) = r.ready_key();
                match (topic.flow.as_deref_mut(), r.key(), state) {
                    (Some(flow), Some(key), State::Active) => {
                        flow.enter_active(key, &mut topic.ready)
                    }
                    (Some(flow), Some(key), _) => {
                        flow.enter_ready(key, (a, b, idx), &mut topic.ready)
                    }
                    (_, _, State::Ready) => {
                        topic.ready.insert((a, b, idx));
                    }
                    _ => {}
                }
            }
        }
    }

    /// Takes the (topic, instant) pairs at which a rate-limited topic may hand out again.
    pub fn take_rate_wakes(&mut self) -> Vec<(Arc<str>, Millis)> {
        std::mem::take(&mut self.rate_wakes)
    }

    /// ACTIVE → FINISHED.
    pub fn finish(
        &mut self,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
        now: Millis,
    ) -> Result<()> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Finish, receipt)?;
        let due = self.records[idx as usize].due_ms;
        self.transition(idx, State::Finished, due, now);
        self.journal_put(idx);
        Ok(())
    }

    /// A failed attempt: retries, backoff or DEAD (docs/design.md §2 rules 4–6).
    fn fail(
        &mut self,
        idx: u32,
        now: Millis,
        delay: Option<u64>,
        outcome: &str,
        error: Option<String>,
    ) -> State {
        let error = error.map(|mut e| {
            delayq_core::validate::truncate_utf8(&mut e, self.max_error_bytes);
            e
        });
        let r = &mut self.records[idx as usize];
        r.push_failure(now, outcome, error);
        let next = lifecycle::after_failure(r.max_retries(), r.backoff(), r.retries(), now, delay);
        match next {
            AfterFailure::Retry { retries, .. }
                if lifecycle::is_expired(r.expires_at_ms(), now) =>
            {
                // It came back after its expiry: it expires now instead of another delivery
                // (a dropped task reports DEAD too: it will not come back either).
                r.set_retries(retries);
                self.expire(idx, now);
                State::Dead
            }
            AfterFailure::Retry { retries, due_ms } => {
                r.set_retries(retries);
                let state = lifecycle::scheduled_state(due_ms, now);
                // An immediate redelivery keeps its original due so it goes to the front.
                let due = if state == State::Ready {
                    r.due_ms
                } else {
                    due_ms
                };
                self.transition(idx, state, due, now);
                self.journal_put(idx);
                state
            }
            AfterFailure::Dead => {
                let due = r.due_ms;
                let topic = &self.topics[r.topic as usize].activity;
                self.metrics.observe_dead(topic);
                self.transition(idx, State::Dead, due, now);
                self.journal_put(idx);
                State::Dead
            }
        }
    }

    /// A task whose expiry passed before it was handed out (docs/design.md §11): DEAD with
    /// the last error `expired`, or deleted with `on_expire: drop`. Journals the change.
    fn expire(&mut self, idx: u32, now: Millis) {
        let r = &self.records[idx as usize];
        let t = r.topic as usize;
        self.metrics
            .spans()
            .dead(&self.topics[t].name, r.id(), r.trace(), now, EXPIRED);
        self.topics[t].expired += 1;
        self.metrics.observe_expired(&self.topics[t].activity);
        match r.on_expire() {
            OnExpire::Drop => {
                let r = self.remove_record(idx);
                let name = Arc::clone(&self.topics[t].name);
                self.journal.remove(&name, r.id());
            }
            OnExpire::Dead => {
                self.metrics.observe_dead(&self.topics[t].activity);
                let r = &mut self.records[idx as usize];
                r.extra_mut().last_error = Some(EXPIRED.to_owned());
                let due = r.due_ms;
                self.transition(idx, State::Dead, due, now);
                self.journal_put(idx);
            }
        }
    }

    /// ACTIVE → READY/DELAYED/DEAD on a consumer's release.
    pub fn release(
        &mut self,
        topic: &str,
        id: &str,
        options: ReleaseOptions,
        now: Millis,
    ) -> Result<State> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Release, options.receipt.as_deref())?;
        if let Some(priority) = options.priority {
            // ACTIVE is in no priority ordering: the new priority counts from the next state.
            self.records[idx as usize].priority = priority;
        }
        Ok(self.fail(idx, now, options.delay_ms, "released", options.error))
    }

    /// ACTIVE: restarts the ttr.
    pub fn touch(
        &mut self,
        topic: &str,
        id: &str,
        receipt: Option<&str>,
        now: Millis,
    ) -> Result<Millis> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Touch, receipt)?;
        let r = &mut self.records[idx as usize];
        let deadline = now.saturating_add(r.ttr_ms());
        r.set_deadline_ms(deadline);
        self.arm(idx, deadline);
        self.journal_put(idx);
        Ok(deadline)
    }

    /// DELAYED/READY/ACTIVE → CANCELLED.
    pub fn cancel(&mut self, topic: &str, id: &str, now: Millis) -> Result<()> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Cancel, None)?;
        let due = self.records[idx as usize].due_ms;
        self.transition(idx, State::Cancelled, due, now);
        self.journal_put(idx);
        Ok(())
    }

    /// DEAD → READY, retries reset.
    pub fn requeue(&mut self, topic: &str, id: &str, now: Millis) -> Result<()> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Requeue, None)?;
        self.requeue_idx(idx, now);
        Ok(())
    }

    fn requeue_idx(&mut self, idx: u32, now: Millis) {
        let r = &mut self.records[idx as usize];
        r.set_retries(0);
        // An operator's explicit act: the task is wanted now, whatever its expiry said.
        r.clear_expiry();
        let due = r.due_ms;
        self.transition(idx, State::Ready, due, now);
        self.journal_put(idx);
    }

    /// Every DEAD task of `topic` → READY.
    pub fn requeue_all(&mut self, topic: &str, now: Millis) -> u64 {
        let Some(t) = self.topic_idx(topic) else {
            return 0;
        };
        let dead: Vec<u32> = self.topics[t as usize].by_state[State::Dead as usize]
            .iter()
            .map(|&k| slot_of_key(k))
            .collect();
        for &idx in &dead {
            self.requeue_idx(idx, now);
        }
        dead.len() as u64
    }

    /// ACTIVE → DEAD: the consumer buries the task (rule 13). The reason is kept as the last
    /// error ("buried" unless given), the attempt goes into the history, and a given priority
    /// replaces the task's.
    pub fn bury(&mut self, topic: &str, id: &str, options: BuryOptions, now: Millis) -> Result<()> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Bury, options.receipt.as_deref())?;
        let mut error = options.error.unwrap_or_else(|| "buried".to_owned());
        delayq_core::validate::truncate_utf8(&mut error, self.max_error_bytes);
        self.unlink(idx);
        let r = &mut self.records[idx as usize];
        if let Some(priority) = options.priority {
            r.priority = priority;
        }
        r.push_failure(now, "buried", Some(error));
        let due = r.due_ms;
        let topic = &self.topics[r.topic as usize].activity;
        self.metrics.observe_dead(topic);
        self.enter(idx, State::Dead, due, now);
        self.journal_put(idx);
        Ok(())
    }

    /// DELAYED/READY → due at `due_ms`: READY when it has passed, else DELAYED (rule 15).
    pub fn reschedule(
        &mut self,
        topic: &str,
        id: &str,
        due_ms: Millis,
        now: Millis,
    ) -> Result<State> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Reschedule, None)?;
        let r = &self.records[idx as usize];
        lifecycle::check_due_before_expiry(due_ms, r.expires_at_ms())
            .map_err(|refusal| Error::conflict(topic, id, refusal))?;
        let state = lifecycle::scheduled_state(due_ms, now);
        self.transition(idx, state, due_ms, now);
        self.journal_put(idx);
        Ok(state)
    }

    /// beanstalkd's `kick`: up to `max` DEAD tasks → READY, oldest buried first, retries
    /// reset; if the topic has no DEAD task, up to `max` DELAYED tasks → READY, earliest due
    /// first, due now. Returns how many moved.
    pub fn kick(&mut self, topic: &str, max: u64, now: Millis) -> u64 {
        let Some(t) = self.topic_idx(topic) else {
            return 0;
        };
        let take = usize::try_from(max).unwrap_or(usize::MAX);
        let t = &self.topics[t as usize];
        if !t.dead.is_empty() {
            let dead: Vec<u32> = t.dead.iter().take(take).map(|&(_, _, idx)| idx).collect();
            for &idx in &dead {
                self.requeue_idx(idx, now);
            }
            return dead.len() as u64;
        }
        let delayed: Vec<u32> = t.by_state[State::Delayed as usize]
            .iter()
            .take(take)
            .map(|&k| slot_of_key(k))
            .collect();
        for &idx in &delayed {
            self.kick_delayed(idx, now);
        }
        delayed.len() as u64
    }

    fn kick_delayed(&mut self, idx: u32, now: Millis) {
        self.transition(idx, State::Ready, now, now);
        self.journal_put(idx);
    }

    /// beanstalkd's `kick-job`: one DEAD task (retries reset) or DELAYED task (due now) →
    /// READY.
    pub fn kick_job(&mut self, topic: &str, id: &str, now: Millis) -> Result<()> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Kick, None)?;
        if self.records[idx as usize].state == State::Dead {
            self.requeue_idx(idx, now);
        } else {
            self.kick_delayed(idx, now);
        }
        Ok(())
    }

    /// beanstalkd's `reserve-job`: one READY, DELAYED or DEAD task → ACTIVE with a fresh
    /// receipt, whatever its place in the order and whether the topic is paused (beanstalkd
    /// hands a named job out from a paused tube too). A DELAYED task is taken as if kicked
    /// first (due now), a DEAD one as if requeued first (retries reset).
    pub fn take(&mut self, topic: &str, id: &str, now: Millis) -> Result<Delivery> {
        let idx = self.find_or_404(topic, id)?;
        self.check(idx, Op::Take, None)?;
        let r = &self.records[idx as usize];
        if r.state != State::Dead && lifecycle::is_expired(r.expires_at_ms(), now) {
            // Too late to hand it out: it expires now, and the caller learns what became of it.
            self.expire(idx, now);
            self.find_or_404(topic, id)?;
            return Err(Error::conflict(
                topic,
                id,
                lifecycle::Refusal::WrongState {
                    state: State::Dead,
                    op: Op::Take,
                },
            ));
        }
        let receipt = self.next_receipt();
        let r = &mut self.records[idx as usize];
        let due = match r.state {
            State::Delayed => now,
            State::Dead => {
                r.set_retries(0);
                r.clear_expiry();
                r.due_ms
            }
            _ => r.due_ms,
        };
        self.unlink(idx);
        let r = &mut self.records[idx as usize];
        r.set_receipt(receipt);
        r.set_deadline_ms(now.saturating_add(r.ttr_ms()));
        self.enter(idx, State::Active, due, now);
        self.journal_put(idx);
        let name = Arc::clone(self.topic_name(idx));
        Ok(self.records[idx as usize].delivery(&name))
    }

    /// Pauses `topic` until `until_ms` (or until resumed); a topic with no records may be
    /// paused and is then listed with its pause.
    pub fn pause(&mut self, topic: &str, until_ms: Option<Millis>) {
        let t = self.topic_idx_or_create(topic);
        let pause = Pause {
            paused: true,
            until_ms,
        };
        self.topics[t as usize].pause = pause;
        self.journal.pause(topic, pause);
    }

    /// Ends the pause of `topic`. Returns whether it was paused at `now`.
    pub fn resume(&mut self, topic: &str, now: Millis) -> bool {
        let Some(t) = self.topic_idx(topic) else {
            return false;
        };
        let t = &mut self.topics[t as usize];
        let was = t.pause.holds(now);
        if t.pause != Pause::default() {
            t.pause = Pause::default();
            self.journal.pause(topic, Pause::default());
        }
        was
    }

    /// The next task of `topic` in `state` without taking it: READY in pop order, DELAYED
    /// earliest due, DEAD oldest buried, the other states earliest due.
    pub fn peek(&self, topic: &str, state: State) -> Option<TaskInfo> {
        let t = &self.topics[self.topic_idx(topic)? as usize];
        let idx = match state {
            State::Ready => t.ready.first().map(|&(_, _, idx)| idx),
            State::Dead => t.dead.first().map(|&(_, _, idx)| idx),
            other => t.by_state[other as usize].first().map(|&k| slot_of_key(k)),
        }?;
        Some(self.records[idx as usize].info(topic))
    }

    /// The topics of this shard holding a task with this id.
    pub fn locate(&self, id: &str) -> Vec<String> {
        let hash = self.hasher.hash_one(id.as_bytes());
        self.topics
            .iter()
            .filter(|t| {
                t.ids
                    .find(hash, |&r| {
                        self.records[r as usize].id_bytes() == id.as_bytes()
                    })
                    .is_some()
            })
            .map(|t| t.name.to_string())
            .collect()
    }

    /// Hands out the next job id (shard 0) and the reservation that covers it, which the
    /// caller reports with [`Shard::job_ids_durable`] once its operation is durable.
    ///
    /// A reservation of the next block is logged when the current one is used up. Until a
    /// reservation is known durable, every id handed out from it logs it again, so the
    /// operation that hands out an id waits for a durable reservation covering it: a crash
    /// can never bring back a counter below an id that was handed out.
    pub fn next_job_id(&mut self) -> (u64, u64) {
        if self.job_next > self.job_reserved {
            self.job_reserved = self.job_next.saturating_add(JOB_ID_BLOCK - 1);
            self.journal.job_ids(self.job_reserved);
        } else if self.job_next > self.job_durable {
            self.journal.job_ids(self.job_reserved);
        }
        let id = self.job_next;
        self.job_next += 1;
        (id, self.job_reserved)
    }

    /// Notes that job id reservations up to `reserved` are durable.
    pub fn job_ids_durable(&mut self, reserved: u64) {
        self.job_durable = self.job_durable.max(reserved);
    }

    /// The highest job id reserved so far (for snapshots).
    pub fn job_ids_reserved(&self) -> u64 {
        self.job_reserved
    }

    /// Every topic's pause that is set, for a snapshot.
    pub fn pauses(&self) -> impl Iterator<Item = (&str, Pause)> {
        self.topics
            .iter()
            .filter(|t| t.pause.paused)
            .map(|t| (&*t.name, t.pause))
    }

    /// Removes a record in any state.
    pub fn delete(&mut self, topic: &str, id: &str) -> Result<()> {
        let idx = self.find_or_404(topic, id)?;
        let r = self.remove_record(idx);
        self.journal.remove(topic, r.id());
        Ok(())
    }

    /// The full view of a task.
    pub fn get(&self, topic: &str, id: &str) -> Result<TaskInfo> {
        let idx = self.find_or_404(topic, id)?;
        Ok(self.records[idx as usize].info(topic))
    }

    /// One page of a topic's tasks ordered by due (`page` from 1).
    pub fn list(
        &self,
        topic: &str,
        state: Option<State>,
        page: u64,
        page_size: u64,
    ) -> Page<TaskInfo> {
        let mut out = Page {
            items: Vec::new(),
            total: 0,
            page,
            page_size,
        };
        let Some(t) = self.topic_idx(topic) else {
            return out;
        };
        let t = &self.topics[t as usize];
        let skip =
            usize::try_from(page.saturating_sub(1).saturating_mul(page_size)).unwrap_or(usize::MAX);
        let take = usize::try_from(page_size).unwrap_or(usize::MAX);
        let sets: Vec<&DueSet<(u64, u64)>> = match state {
            Some(s) => vec![&t.by_state[s as usize]],
            None => t.by_state.iter().collect(),
        };
        out.total = sets.iter().map(|s| s.len() as u64).sum();
        out.items = merge_sorted(sets.iter().map(|s| s.iter().copied()))
            .skip(skip)
            .take(take)
            .map(|k| self.records[slot_of_key(k) as usize].info(topic))
            .collect();
        out
    }

    /// The counters of one topic, with its pause as it stands at `now`.
    pub fn stats(&self, topic: &str, now: Millis) -> TopicStats {
        self.topic_idx(topic)
            .map(|t| self.topics[t as usize].stats(now))
            .unwrap_or_default()
    }

    /// Adds to `counts[i]` the DELAYED tasks of `topic` due in `[bounds[i], bounds[i + 1])`
    /// (`bounds` sorted, `counts` one shorter), walking the topic's DELAYED ordering from
    /// after `resume` (a key returned by an earlier call) or from `bounds[0]`, and visiting at
    /// most `budget` tasks. Returns the key to resume after when the budget ran out, so a
    /// caller can count a big topic in steps without holding the shard for long.
    pub fn due_counts_step(
        &self,
        topic: &str,
        bounds: &[Millis],
        counts: &mut [u64],
        resume: Option<(u64, u64)>,
        budget: usize,
    ) -> Option<(u64, u64)> {
        use std::ops::Bound::{Excluded, Included};
        let (Some(&first), Some(&last)) = (bounds.first(), bounds.last()) else {
            return None;
        };
        if counts.len() + 1 != bounds.len() {
            return None;
        }
        let t = &self.topics[self.topic_idx(topic)? as usize];
        // A due key's first half is `due << 16 | ...`: every key of a due at or after `d` is
        // at or after `(d << 16, 0)` (dues clamp at SEQ_MAX as in `Record::due_key`).
        let key_of = |d: Millis| (d.min(SEQ_MAX) << 16, 0u64);
        let end = key_of(last);
        let start = match resume {
            Some(k) if k >= end => return None,
            Some(k) => Excluded(k),
            None if key_of(first) >= end => return None,
            None => Included(key_of(first)),
        };
        let mut bucket = 0;
        let mut counted = None;
        for (n, &key) in t.by_state[State::Delayed as usize]
            .range((start, Excluded(end)))
            .enumerate()
        {
            if n >= budget.max(1) {
                return counted;
            }
            let due = due_of_key(key);
            while bucket + 1 < counts.len() && due >= bounds[bucket + 1] {
                bucket += 1;
            }
            counts[bucket] += 1;
            counted = Some(key);
        }
        None
    }

    /// Every topic with records or a pause in force, with its counters.
    pub fn topics(&self, now: Millis) -> Vec<(String, TopicStats)> {
        self.topics
            .iter()
            .filter(|t| t.total() > 0 || t.pause.holds(now))
            .map(|t| (t.name.to_string(), t.stats(now)))
            .collect()
    }

    // ---- time-driven work --------------------------------------------------------------

    /// Applies about `limit` timers and promotions due at `now`. Returns how many were
    /// applied: fewer than `limit` means nothing more is due (a topic's promotions may take
    /// it a little past `limit`, each timer drained promoting at least one task).
    pub fn fire(&mut self, now: Millis, limit: usize) -> usize {
        let mut applied = 0;
        let mut due: Vec<Expired<Timer>> = Vec::with_capacity(limit.min(1024));
        while applied < limit {
            due.clear();
            if self.wheel.drain_due(now, limit - applied, &mut due) == 0 {
                break;
            }
            for e in due.drain(..) {
                match e.value {
                    Timer::Record(idx) => {
                        self.fire_record(idx, e.key, now);
                        applied += 1;
                    }
                    Timer::Delayed(t) => {
                        let topic = &mut self.topics[t as usize];
                        if topic.delayed_timer.map(|(key, _)| key) != Some(e.key) {
                            continue; // defensive: a timer that was replaced
                        }
                        topic.delayed_timer = None;
                        // At least one, so that every timer drained makes progress.
                        let budget = limit.saturating_sub(applied).max(1);
                        applied += self.promote_due(t, now, budget);
                    }
                }
            }
        }
        applied
    }

    /// Moves up to `budget` DELAYED tasks of topic `t` due at `now` to READY, earliest first
    /// (or expires them), then arms the topic's timer at its next due. Returns how many moved.
    fn promote_due(&mut self, t: u32, now: Millis, budget: usize) -> usize {
        let mut n = 0;
        loop {
            let Some(&key) = self.topics[t as usize].by_state[State::Delayed as usize].first()
            else {
                return n;
            };
            let idx = slot_of_key(key);
            let r = &self.records[idx as usize];
            if r.due_ms > now || n == budget {
                let due = r.due_ms;
                self.arm_delayed(t, due);
                return n;
            }
            n += 1;
            if lifecycle::is_expired(r.expires_at_ms(), now) {
                self.expire(idx, now);
                continue;
            }
            let topic = &self.topics[t as usize];
            self.metrics
                .observe_fire(&topic.activity, now.saturating_sub(r.due_ms));
            let due = r.due_ms;
            self.metrics
                .spans()
                .fired(&topic.name, r.id(), r.trace(), due, now);
            self.transition(idx, State::Ready, due, now);
        }
    }

    /// Applies the timer of record `idx` that came due (the table in the module doc).
    fn fire_record(&mut self, idx: u32, key: TimerKey, now: Millis) {
        let Some(r) = self.records.get_mut(idx as usize) else {
            return;
        };
        if r.timer() != Some(key) {
            return; // defensive: a timer that was replaced
        }
        r.take_timer();
        let r = &self.records[idx as usize];
        let topic = &self.topics[r.topic as usize].activity;
        match r.state {
            State::Delayed | State::Ready if lifecycle::is_expired(r.expires_at_ms(), now) => {
                self.expire(idx, now);
            }
            State::Active => {
                self.metrics.observe_ttr_expired(topic);
                // A task past its expiry expires in `fail`, which records its span; else
                // what a dead span needs is read before the failure changes the record.
                let traced = (self.metrics.spans().traces(r.trace())
                    && !lifecycle::is_expired(r.expires_at_ms(), now))
                .then(|| {
                    let name = Arc::clone(&self.topics[r.topic as usize].name);
                    (name, r.id().to_owned(), r.trace().cloned())
                });
                if self.fail(idx, now, None, "ttr_expired", None) == State::Dead
                    && let Some((name, id, trace)) = traced
                {
                    self.metrics
                        .spans()
                        .dead(&name, &id, trace.as_ref(), now, "ttr_expired");
                }
            }
            State::Finished | State::Cancelled => {
                self.remove_record(idx);
            }
            // A DELAYED record's own timer is its expiry before its due, so it expired
            // above; its promotion is its topic's timer's (`promote_due`).
            State::Delayed | State::Ready | State::Dead => {}
        }
    }

    /// Puts back a record read from durable storage, as it was; timers and orderings are
    /// rebuilt, and anything whose time passed while the process was down happens on the next
    /// [`Shard::fire`].
    ///
    /// A record without an insertion sequence (0: written by format version 1) keeps the one of
    /// the record it replaces, or gets the next one, so replay order stands for insertion
    /// order. The shard's counter moves past every sequence restored.
    pub fn restore(&mut self, topic: &str, mut record: Record, now: Millis) {
        let mut seq = record.seq();
        // One hash of the id serves the lookup and the insert: recovery is mostly these two.
        let hash = self.hasher.hash_one(record.id_bytes());
        let existing = self.topic_idx(topic);
        if let Some(old) = existing.and_then(|t| self.find_hashed(t, hash, record.id_bytes())) {
            if seq == 0 {
                seq = self.records[old as usize].seq();
            }
            self.remove_record(old);
        }
        if seq == 0 {
            seq = self.next_seq();
        }
        record.set_seq(seq);
        self.seq.fetch_max(seq + 1, Ordering::AcqRel);
        if record.state.is_terminal() && record.deadline_ms() <= now {
            return; // its retention passed while the process was down
        }
        let t = existing.unwrap_or_else(|| self.topic_idx_or_create(topic));
        record.topic = t;
        record.take_timer();
        self.restored += 1;
        self.reserve_ids_restoring(t);
        let idx = self.records.insert(record) as u32;
        let records = &self.records;
        let hasher = &self.hasher;
        self.topics[t as usize].ids.insert_unique(hash, idx, |&i| {
            hasher.hash_one(records[i as usize].id_bytes())
        });
        if let Some(at) = timer_at(&self.records[idx as usize]) {
            // A time that passed while the process was down fires on the next `fire`.
            self.arm(idx, at);
        }
        self.link(idx);
        // Nobody can be waiting yet; don't collect a wake-up per restored ready task.
        self.became_ready.clear();
    }

    /// Tells recovery how many records it will restore, about: `records` (from the snapshot's
    /// count and the log's size). Without it a topic's id table doubles as it fills, and each
    /// doubling hashes every id again from its record, a cache miss or two apiece: at 10M
    /// tasks in one topic that was the largest part of a restart. With it, a table that
    /// must grow grows at once to its topic's share (so far) of everything expected; the
    /// tables are trimmed in [`Shard::restore_done`] where the guess was high.
    pub fn restore_expect(&mut self, records: u64) {
        self.restore_expected = self.restore_expected.saturating_add(records);
    }

    /// Ends recovery's sizing: an id table more than twice as large as it needs is trimmed.
    pub fn restore_done(&mut self) {
        self.restore_expected = 0;
        self.restored = 0;
        let (records, hasher) = (&self.records, &self.hasher);
        for t in &mut self.topics {
            if t.ids.capacity() > 2 * t.ids.len() + 64 {
                t.ids
                    .shrink_to_fit(|&i| hasher.hash_one(records[i as usize].id_bytes()));
            }
        }
    }

    /// Grows topic `t`'s id table, when full, to the topic's share of what recovery still
    /// expects (at least doubling it). See [`Shard::restore_expect`].
    fn reserve_ids_restoring(&mut self, t: u32) {
        let ids = &self.topics[t as usize].ids;
        if ids.len() < ids.capacity() {
            return;
        }
        let len = ids.len() as u64;
        let to_come = self.restore_expected.saturating_sub(self.restored);
        let share = to_come.saturating_mul(len) / self.restored.max(1);
        let additional = usize::try_from(share)
            .unwrap_or(usize::MAX)
            .max(ids.len())
            .max(16);
        let (records, hasher) = (&self.records, &self.hasher);
        self.topics[t as usize].ids.reserve(additional, |&i| {
            hasher.hash_one(records[i as usize].id_bytes())
        });
    }

    /// Puts back a topic's pause read from durable storage.
    pub fn restore_pause(&mut self, topic: &str, pause: Pause) {
        if pause.paused {
            let t = self.topic_idx_or_create(topic);
            self.topics[t as usize].pause = pause;
        } else if let Some(t) = self.topic_idx(topic) {
            self.topics[t as usize].pause = pause;
        }
    }

    /// Puts back a job id reservation read from durable storage: ids resume past it.
    pub fn restore_job_ids(&mut self, reserved: u64) {
        if reserved > self.job_reserved {
            self.job_reserved = reserved;
            self.job_durable = reserved;
            self.job_next = reserved.saturating_add(1);
        }
    }

    /// Removes a record read from durable storage as deleted.
    pub fn restore_removal(&mut self, topic: &str, id: &str) {
        if let Some(idx) = self.find(topic, id) {
            self.remove_record(idx);
        }
    }

    /// The records in slots `start` and after, with their slot and topic name, in slot order:
    /// a snapshot reads them a piece at a time. A record's slot does not change while it lives.
    pub fn records_from(&self, start: usize) -> impl Iterator<Item = (usize, &str, &Record)> {
        self.records
            .iter_from(start)
            .map(|(slot, r)| (slot, &*self.topics[r.topic as usize].name, r))
    }
}

/// When a record's timer fires, by its state (see the table in the module doc).
fn timer_at(r: &Record) -> Option<Millis> {
    match r.state {
        // Its due is its topic's DELAYED timer's; only an expiry before it needs one of its own.
        State::Delayed => r.expires_at_ms().filter(|&at| at < r.due_ms),
        State::Ready => r.expires_at_ms(),
        State::Active | State::Finished | State::Cancelled => Some(r.deadline_ms()),
        State::Dead => None,
    }
}

/// Merges sorted iterators into one sorted iterator (k is at most six here).
fn merge_sorted<T: Ord + Copy>(
    iters: impl Iterator<Item = impl Iterator<Item = T>>,
) -> impl Iterator<Item = T> {
    let mut heads: Vec<_> = iters.map(|i| i.peekable()).collect();
    std::iter::from_fn(move || {
        let (best, _) = heads
            .iter_mut()
            .enumerate()
            .filter_map(|(i, it)| it.peek().map(|v| (i, *v)))
            .min_by_key(|&(_, v)| v)?;
        heads[best].next()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::storage::engine::NoJournal;
    use delayq_core::NewTask;
    use delayq_core::validate::{Limits, validate_task};

    #[test]
    fn a_plain_delayed_task_has_no_side_box_and_an_active_one_has() {
        let now = 1_800_000_000_000;
        let defaults = TaskDefaults::default();
        let mut shard = Shard::new(
            now,
            7,
            defaults,
            4_096,
            Arc::new(Metrics::default()),
            NoJournal,
        );
        let spec = |id: &str, delay_ms| {
            let task = NewTask::new("t", id).delay_ms(delay_ms);
            validate_task(task, &Limits::default(), &defaults, now).unwrap()
        };
        // The queue reads the creation time rounded up and the shard's `now` rounded down, a
        // millisecond apart: still no box.
        for (id, created) in [("a", now), ("b", now + 1)] {
            let mut spec = spec(id, 60_000);
            spec.created_at_ms = created;
            shard.add(spec, now).unwrap();
            let r = &shard.records[shard.find("t", id).unwrap() as usize];
            assert!(!r.has_side(), "{id}");
            assert_eq!((r.created_at_ms(), r.updated_at_ms()), (created, now));
        }
        shard.add(spec("c", 0), now).unwrap();
        let popped = shard.pop("t", 1, false, now);
        assert_eq!(popped[0].id, "c");
        let r = &shard.records[shard.find("t", "c").unwrap() as usize];
        assert!(
            r.has_side(),
            "an ACTIVE task keeps its receipt, deadline and timer aside"
        );
        assert_eq!(r.receipt_text(), popped[0].receipt);
        assert_eq!(r.deadline_ms(), now + defaults.ttr_ms);
    }

    /// Recovery sizes the id tables from a hint (`restore_expect`); whatever the hint, every
    /// record restored is found by its id afterwards, a replaced one once, and a table the
    /// hint made too large is trimmed.
    #[test]
    fn restore_finds_every_record_whatever_the_hint() {
        let now = 1_800_000_000_000;
        let defaults = TaskDefaults::default();
        let new_shard = || {
            Shard::new(
                now,
                7,
                defaults,
                4_096,
                Arc::new(Metrics::default()),
                NoJournal,
            )
        };
        let mut source = new_shard();
        let mut ids = Vec::new();
        for (topic, n) in [("big", 3_000), ("mid", 300), ("small", 3)] {
            for i in 0..n {
                let id = format!("{topic}-{i}");
                let task = NewTask::new(topic, &id).delay_ms(60_000 + i);
                let spec = validate_task(task, &Limits::default(), &defaults, now).unwrap();
                source.add(spec, now).unwrap();
                ids.push((topic, id));
            }
        }
        let saved: Vec<(String, Record)> = source
            .records_from(0)
            .map(|(_, topic, r)| (topic.to_owned(), r.clone()))
            .collect();
        let total = saved.len() as u64;
        // The hint: none, exact, far too high, too low; the last run replays every record
        // twice, as a log of updates would.
        for (hint, twice) in [(0, false), (total, false), (100 * total, false), (10, true)] {
            let mut shard = new_shard();
            shard.restore_expect(hint);
            for _ in 0..(1 + usize::from(twice)) {
                for (topic, record) in &saved {
                    shard.restore(topic, record.clone(), now);
                }
            }
            shard.restore_done();
            for (topic, id) in &ids {
                let info = shard.get(topic, id).unwrap();
                assert_eq!(info.state, State::Delayed, "hint {hint}: {topic}/{id}");
            }
            for t in &shard.topics {
                let n = ids.iter().filter(|(topic, _)| **topic == *t.name).count();
                assert_eq!(t.ids.len(), n, "hint {hint}: {}", t.name);
                assert_eq!(t.by_state[State::Delayed as usize].len(), n, "hint {hint}");
                assert!(
                    t.ids.capacity() <= 2 * n + 64,
                    "hint {hint}: {} holds room for {} ids, has {n}",
                    t.name,
                    t.ids.capacity()
                );
            }
        }
    }

    #[test]
    fn merge_is_sorted_and_complete() {
        let a = [1, 4, 9];
        let b = [2, 3, 10];
        let c: [i32; 0] = [];
        let merged: Vec<i32> =
            merge_sorted([a.iter().copied(), b.iter().copied(), c.iter().copied()].into_iter())
                .collect();
        assert_eq!(merged, vec![1, 2, 3, 4, 9, 10]);
    }
}
