//! One task's record as the engine keeps it in memory, kept small (64 bytes): the common case
//! (a delayed task with no backoff, no failures, no trace context, no expiry, a ttr below
//! `u32::MAX` ms, fewer than 255 retries and a limit below 254) carries one heap allocation,
//! its id and body together. What only some tasks need, or need only for a while (the
//! receipt, deadline and timer of an ACTIVE, retained or expiring task; the [`Extra`]; a
//! count or time too wide for its narrow field), lives behind one optional box that goes as
//! soon as it is empty. The due time stays exact in 64 bits, the update time exact as a
//! delta from the creation (or in the box); the creation time is kept in 48 bits (exact to
//! the year 10889).
//!
//! This is the in-memory form only: the log and snapshots encode every field in full
//! (`storage::embedded::codec`), whatever the record packs.

use std::collections::VecDeque;

use delayq_core::wheel::TimerKey;
use delayq_core::{
    Attempt, Backoff, Delivery, MaxRetries, Millis, OnExpire, State, TaskInfo, TraceContext,
};

/// A task's record. Its fields are the engine's business: outside the crate a record is only
/// what a [`Journal`](super::Journal) is handed to store.
///
/// 64 bytes. What a task needs only while ACTIVE, retained or expiring (its receipt, its
/// deadline, its own timer), the rarely used [`Extra`], and any count or time too wide for
/// the record's own narrow fields (a ttr of `u32::MAX` ms or more, 255 retries or more, a
/// limit of 254 or more, an update more than 24.8 days away from the creation) live behind one
/// optional box ([`Side`]), so the common delayed task carries none of it. The creation time
/// is held in 48 bits (see [`pack48`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The caller's id, then the payload, in one allocation: one allocation a task instead of
    /// two, and one pointer in the record instead of two (see [`Record::pack`]).
    pub(crate) data: Box<[u8]>,
    /// What only some tasks need, or only for a while; `None` when all of it is empty.
    side: Option<Box<Side>>,
    /// When the task is (or was) due, exact to the millisecond.
    pub(crate) due_ms: Millis,
    /// Index of the topic in its shard.
    pub(crate) topic: u32,
    /// Lower first (docs/design.md §2 rule 11).
    pub(crate) priority: u32,
    /// The low 32 bits of the insertion sequence (see [`Record::seq`]).
    pub(crate) seq_lo: u32,
    /// Time to run; `u32::MAX` means "in the side box" (see [`Record::ttr_ms`]).
    ttr_lo: u32,
    /// The low 32 bits of when the task was added.
    created_lo: u32,
    /// When the task last changed state (for ACTIVE: when the attempt started), as
    /// milliseconds after its creation, signed: an add reads the clock once rounded up for
    /// the creation and once rounded down for the update, so the update can come a
    /// millisecond before. `i32::MIN` means "in the side box" (more than 24.8 days away: see
    /// [`Record::updated_at_ms`]).
    updated_delta: i32,
    /// The high 16 bits of the insertion sequence: 48 bits outlast any engine (2.8e14 adds).
    pub(crate) seq_hi: u16,
    /// The high 16 bits of the creation time.
    created_hi: u16,
    /// Redeliveries so far; `u8::MAX` means "in the side box" (see [`Record::retries`]).
    retries_lo: u8,
    /// Redeliveries allowed: a limit below 254 as itself, [`MAX_RETRIES_UNLIMITED`] for none,
    /// [`MAX_RETRIES_WIDE`] for "in the side box" (see [`Record::max_retries`]).
    max_retries_lo: u8,
    /// The id's length less one: ids are 1 to 256 bytes (docs/design.md §1).
    pub(crate) id_last: u8,
    /// The state.
    pub(crate) state: State,
}

// Records are the bulk of the memory (docs/design.md §6: <= 150 B a delayed task beyond its
// body): a field that grows the record must be a decision, not an accident.
const _: () = assert!(std::mem::size_of::<Record>() <= 64);

/// [`Record::max_retries_lo`] of [`MaxRetries::Unlimited`].
const MAX_RETRIES_UNLIMITED: u8 = u8::MAX - 1;
/// [`Record::max_retries_lo`] of a limit kept in the side box.
const MAX_RETRIES_WIDE: u8 = u8::MAX;

/// Every field of a [`Record`], unpacked: what building a record takes.
#[derive(Debug, Clone)]
pub(crate) struct RecordFields {
    pub(crate) topic: u32,
    pub(crate) data: Box<[u8]>,
    pub(crate) id_last: u8,
    pub(crate) priority: u32,
    pub(crate) seq: u64,
    pub(crate) state: State,
    pub(crate) retries: u32,
    pub(crate) ttr_ms: Millis,
    pub(crate) max_retries: MaxRetries,
    pub(crate) due_ms: Millis,
    pub(crate) created_at_ms: Millis,
    pub(crate) updated_at_ms: Millis,
    pub(crate) deadline_ms: Millis,
    pub(crate) receipt: u64,
    pub(crate) key: Option<Box<str>>,
    pub(crate) extra: Option<Box<Extra>>,
}

/// The part of a record only some records need, or only for a while. A record drops its box
/// as soon as everything in it is empty again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Side {
    /// ACTIVE: the ttr deadline; FINISHED/CANCELLED: when the record goes; otherwise 0.
    deadline_ms: Millis,
    /// The receipt of the current attempt (ACTIVE), else 0.
    receipt: u64,
    /// The time to run, when it does not fit the record's four bytes; else 0.
    ttr_ms: Millis,
    /// When the task last changed state, when the record's delta cannot say it; else 0.
    updated_at_ms: Millis,
    /// Redeliveries so far, when they do not fit the record's byte; else 0.
    retries: u32,
    /// Redeliveries allowed, when the record's byte cannot say it; else `None`.
    max_retries: Option<MaxRetries>,
    /// The record's timer in the shard's wheel, if it has one.
    timer: Option<TimerKey>,
    /// The flow-control key (docs/design.md §11). Here rather than in [`Extra`]: keyed tasks
    /// can be most of a queue, and a key alone should not bring the larger box.
    key: Option<Box<str>>,
    /// What only some tasks need.
    extra: Option<Box<Extra>>,
}

/// A time in 48 bits, as (high 16, low 32): exact below 2^48 ms (the year 10889); later times
/// are held as 2^48 - 1, as [`Record::ready_key`] already compares them.
pub(crate) fn pack48(ms: Millis) -> (u16, u32) {
    let ms = ms.min(SEQ_MAX);
    ((ms >> 32) as u16, ms as u32)
}

/// The time [`pack48`] packed.
pub(crate) fn unpack48(hi: u16, lo: u32) -> Millis {
    u64::from(hi) << 32 | u64::from(lo)
}

/// The rarely used part of a record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Extra {
    /// The retry schedule.
    pub(crate) backoff: Option<Backoff>,
    /// The last error a consumer reported.
    pub(crate) last_error: Option<String>,
    /// Failed attempts, oldest first.
    pub(crate) history: VecDeque<Attempt>,
    /// The producer's trace context, kept for the task's whole life (retries included).
    pub(crate) trace: Option<TraceContext>,
    /// When the task expires unless handed out before (docs/design.md §11).
    pub(crate) expires_at_ms: Option<Millis>,
    /// What its expiry does.
    pub(crate) on_expire: OnExpire,
}

/// The largest insertion sequence a record can hold (48 bits).
pub(crate) const SEQ_MAX: u64 = (1 << 48) - 1;

/// The due time of a [`Record::due_key`] (exact below 2^48 ms).
pub(crate) fn due_of_key(key: (u64, u64)) -> u64 {
    key.0 >> 16
}

/// The record slot of a [`Record::due_key`].
pub(crate) fn slot_of_key(key: (u64, u64)) -> u32 {
    key.1 as u32
}

/// An id a record cannot hold: ids are 1 to 256 bytes (docs/design.md §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadIdLength;

/// The longest id a record holds, in bytes.
pub(crate) const MAX_ID_BYTES: usize = 256;

impl Record {
    /// A record of these fields.
    pub(crate) fn new(f: RecordFields) -> Record {
        let (created_hi, created_lo) = pack48(f.created_at_ms);
        let mut r = Record {
            data: f.data,
            side: None,
            due_ms: f.due_ms,
            topic: f.topic,
            priority: f.priority,
            seq_lo: 0,
            ttr_lo: 0,
            created_lo,
            updated_delta: 0,
            seq_hi: 0,
            created_hi,
            retries_lo: 0,
            max_retries_lo: 0,
            id_last: f.id_last,
            state: f.state,
        };
        r.set_seq(f.seq);
        r.set_ttr_ms(f.ttr_ms);
        r.set_updated_at_ms(f.updated_at_ms);
        r.set_retries(f.retries);
        r.set_max_retries(f.max_retries);
        r.set_deadline_ms(f.deadline_ms);
        r.set_receipt(f.receipt);
        if let Some(key) = f.key {
            r.side_mut().key = Some(key);
        }
        r.set_extra(f.extra);
        r
    }

    /// Whether the record has its side box.
    #[cfg(test)]
    pub(crate) fn has_side(&self) -> bool {
        self.side.is_some()
    }

    /// The side box, made if the record has none.
    fn side_mut(&mut self) -> &mut Side {
        self.side.get_or_insert_with(Box::default)
    }

    /// Drops the side box once nothing is left in it (the fields a narrow field of the record
    /// no longer points to are zero by then).
    fn tidy_side(&mut self) {
        let wide = self.ttr_lo == u32::MAX
            || self.updated_delta == i32::MIN
            || self.retries_lo == u8::MAX
            || self.max_retries_lo == MAX_RETRIES_WIDE;
        if !wide
            && self.side.as_ref().is_some_and(|s| {
                s.deadline_ms == 0
                    && s.receipt == 0
                    && s.timer.is_none()
                    && s.key.is_none()
                    && s.extra.is_none()
            })
        {
            self.side = None;
        }
    }

    /// A field of the side box, or its empty value when the record has no box.
    fn wide<W: Default>(&self, field: fn(&Side) -> W) -> W {
        self.side.as_deref().map_or_else(W::default, field)
    }

    /// Time to run.
    pub fn ttr_ms(&self) -> Millis {
        match self.ttr_lo {
            u32::MAX => self.wide(|s| s.ttr_ms),
            lo => u64::from(lo),
        }
    }

    /// Sets a value kept in a narrow field of the record when it fits (`narrow`), else in a
    /// field of the side box, the narrow one then holding the mark `wide`. The side's field is
    /// reset when the value fits, so equal records compare equal.
    fn set_narrow_or_wide<N, W: Default>(
        &mut self,
        narrow: Option<N>,
        wide: N,
        value: W,
        field: fn(&mut Record) -> &mut N,
        side_field: fn(&mut Side) -> &mut W,
    ) {
        match narrow {
            Some(narrow) => {
                *field(self) = narrow;
                if let Some(side) = self.side.as_mut() {
                    *side_field(side) = W::default();
                }
                self.tidy_side();
            }
            None => {
                *field(self) = wide;
                *side_field(self.side_mut()) = value;
            }
        }
    }

    /// Sets the time to run.
    pub(crate) fn set_ttr_ms(&mut self, ttr_ms: Millis) {
        let narrow = u32::try_from(ttr_ms).ok().filter(|&lo| lo != u32::MAX);
        self.set_narrow_or_wide(
            narrow,
            u32::MAX,
            ttr_ms,
            |r| &mut r.ttr_lo,
            |s| &mut s.ttr_ms,
        );
    }

    /// When the task was added.
    pub fn created_at_ms(&self) -> Millis {
        unpack48(self.created_hi, self.created_lo)
    }

    /// When the task last changed state (for ACTIVE: when the attempt started).
    pub fn updated_at_ms(&self) -> Millis {
        match self.updated_delta {
            i32::MIN => self.wide(|s| s.updated_at_ms),
            // `set_updated_at_ms` checked that this is `ms` again.
            delta => self.created_at_ms().wrapping_add_signed(i64::from(delta)),
        }
    }

    /// Sets when the task last changed state.
    pub(crate) fn set_updated_at_ms(&mut self, ms: Millis) {
        let created = self.created_at_ms();
        let narrow = i64::try_from(i128::from(ms) - i128::from(created))
            .ok()
            .and_then(|d| i32::try_from(d).ok())
            .filter(|&d| d != i32::MIN);
        self.set_narrow_or_wide(
            narrow,
            i32::MIN,
            ms,
            |r| &mut r.updated_delta,
            |s| &mut s.updated_at_ms,
        );
    }

    /// Redeliveries so far.
    pub fn retries(&self) -> u32 {
        match self.retries_lo {
            u8::MAX => self.wide(|s| s.retries),
            n => u32::from(n),
        }
    }

    /// Sets the redeliveries so far.
    pub(crate) fn set_retries(&mut self, retries: u32) {
        let narrow = u8::try_from(retries).ok().filter(|&n| n != u8::MAX);
        self.set_narrow_or_wide(
            narrow,
            u8::MAX,
            retries,
            |r| &mut r.retries_lo,
            |s| &mut s.retries,
        );
    }

    /// Redeliveries allowed.
    pub fn max_retries(&self) -> MaxRetries {
        match self.max_retries_lo {
            MAX_RETRIES_UNLIMITED => MaxRetries::Unlimited,
            // Only `set_max_retries` writes it, with the limit beside it.
            MAX_RETRIES_WIDE => self
                .wide(|s| s.max_retries)
                .unwrap_or(MaxRetries::Unlimited),
            n => MaxRetries::Limited(u32::from(n)),
        }
    }

    /// Sets the redeliveries allowed.
    fn set_max_retries(&mut self, max_retries: MaxRetries) {
        let narrow = match max_retries {
            MaxRetries::Unlimited => Some(MAX_RETRIES_UNLIMITED),
            MaxRetries::Limited(n) => u8::try_from(n).ok().filter(|&n| n < MAX_RETRIES_UNLIMITED),
        };
        self.set_narrow_or_wide(
            narrow,
            MAX_RETRIES_WIDE,
            Some(max_retries),
            |r| &mut r.max_retries_lo,
            |s| &mut s.max_retries,
        );
    }

    /// ACTIVE: the ttr deadline; FINISHED/CANCELLED: when the record goes; otherwise 0.
    pub fn deadline_ms(&self) -> Millis {
        self.wide(|s| s.deadline_ms)
    }

    /// Sets the deadline (0: none).
    pub(crate) fn set_deadline_ms(&mut self, ms: Millis) {
        if ms != 0 {
            self.side_mut().deadline_ms = ms;
        } else if let Some(side) = self.side.as_mut() {
            side.deadline_ms = 0;
            self.tidy_side();
        }
    }

    /// The receipt of the current attempt (ACTIVE), else 0.
    pub fn receipt(&self) -> u64 {
        self.wide(|s| s.receipt)
    }

    /// Sets the receipt (0: none).
    pub(crate) fn set_receipt(&mut self, receipt: u64) {
        if receipt != 0 {
            self.side_mut().receipt = receipt;
        } else if let Some(side) = self.side.as_mut() {
            side.receipt = 0;
            self.tidy_side();
        }
    }

    /// The record's timer in the shard's wheel, if it has one.
    pub(crate) fn timer(&self) -> Option<TimerKey> {
        self.side.as_ref().and_then(|s| s.timer)
    }

    /// Sets the record's timer.
    pub(crate) fn set_timer(&mut self, timer: TimerKey) {
        self.side_mut().timer = Some(timer);
    }

    /// Forgets the record's timer and returns it.
    pub(crate) fn take_timer(&mut self) -> Option<TimerKey> {
        let timer = self.side.as_mut().and_then(|s| s.timer.take());
        self.tidy_side();
        timer
    }

    /// What only some tasks need, if this one has it.
    pub(crate) fn extra(&self) -> Option<&Extra> {
        self.side.as_ref().and_then(|s| s.extra.as_deref())
    }

    /// What only some tasks need, made empty if the record has none.
    pub(crate) fn extra_mut(&mut self) -> &mut Extra {
        self.side_mut().extra.get_or_insert_with(Box::default)
    }

    /// Replaces what only some tasks need; an empty one is none (records of older versions
    /// held an empty one beside a key).
    pub(crate) fn set_extra(&mut self, extra: Option<Box<Extra>>) {
        match extra.filter(|e| **e != Extra::default()) {
            Some(extra) => self.side_mut().extra = Some(extra),
            None => {
                if let Some(side) = self.side.as_mut() {
                    side.extra = None;
                    self.tidy_side();
                }
            }
        }
    }

    /// The `data` and `id_last` of a record of this id and body.
    pub(crate) fn pack(id: &str, body: &[u8]) -> Result<(Box<[u8]>, u8), BadIdLength> {
        let id_last = id
            .len()
            .checked_sub(1)
            .and_then(|last| u8::try_from(last).ok())
            .ok_or(BadIdLength)?;
        let mut data = Vec::with_capacity(id.len() + body.len());
        data.extend_from_slice(id.as_bytes());
        data.extend_from_slice(body);
        Ok((data.into_boxed_slice(), id_last))
    }

    /// The caller's id as bytes (what the id table hashes and compares).
    pub fn id_bytes(&self) -> &[u8] {
        &self.data[..usize::from(self.id_last) + 1]
    }

    /// The caller's id.
    pub fn id(&self) -> &str {
        // `pack` stored a `&str` there, so this never falls back.
        std::str::from_utf8(self.id_bytes()).unwrap_or_default()
    }

    /// The payload.
    pub fn body(&self) -> &[u8] {
        &self.data[usize::from(self.id_last) + 1..]
    }

    /// The insertion sequence: assigned once when the task is added (from one counter shared
    /// by every shard of the engine) and kept for life, so FIFO among equal priority and due
    /// means "added first" (docs/design.md §2 rule 11), also across topics of different shards.
    pub fn seq(&self) -> u64 {
        u64::from(self.seq_hi) << 32 | u64::from(self.seq_lo)
    }

    /// Sets the insertion sequence (masked to 48 bits).
    pub fn set_seq(&mut self, seq: u64) {
        let seq = seq & SEQ_MAX;
        self.seq_lo = seq as u32;
        self.seq_hi = (seq >> 32) as u16;
    }

    /// The key of the READY order: priority, then due, then insertion, packed in two words
    /// (32 + 48 + 48 bits; dues past the year 10889 compare as equal, then by insertion).
    pub fn ready_key(&self) -> (u64, u64) {
        let due = self.due_ms.min(SEQ_MAX);
        (
            u64::from(self.priority) << 32 | due >> 16,
            (due & 0xFFFF) << 48 | self.seq(),
        )
    }

    /// The key of the per-state due order of the record in slot `idx`: due, then insertion,
    /// then the slot, packed in two words (48 + 48 + 32 bits, the size of a plain (due, slot)
    /// pair; dues past the year 10889 compare as equal, as in [`Record::ready_key`]). Two
    /// tasks due in the same millisecond thus come out in the order they were added (DELAYED:
    /// peek-delayed and kick; every state: list).
    pub fn due_key(&self, idx: u32) -> (u64, u64) {
        let due = self.due_ms.min(SEQ_MAX);
        let seq = self.seq();
        (
            due << 16 | seq >> 32,
            (seq & 0xFFFF_FFFF) << 32 | u64::from(idx),
        )
    }

    /// The key of the DEAD order: when the task entered DEAD, then insertion.
    pub fn dead_key(&self) -> (u64, u64) {
        (self.updated_at_ms(), self.seq())
    }

    /// The retry schedule, if any.
    pub fn backoff(&self) -> Option<&Backoff> {
        self.extra().and_then(|e| e.backoff.as_ref())
    }

    /// The trace context the task was added with, if any.
    pub fn trace(&self) -> Option<&TraceContext> {
        self.extra().and_then(|e| e.trace.as_ref())
    }

    /// When the task expires unless handed out before, if it has an expiry.
    pub fn expires_at_ms(&self) -> Option<Millis> {
        self.extra().and_then(|e| e.expires_at_ms)
    }

    /// The task's flow-control key, if it has one.
    pub fn key(&self) -> Option<&str> {
        self.side.as_ref().and_then(|s| s.key.as_deref())
    }

    /// What its expiry does.
    pub fn on_expire(&self) -> OnExpire {
        self.extra().map(|e| e.on_expire).unwrap_or_default()
    }

    /// Forgets the expiry: an operator's requeue or kick of a DEAD task brings it back for good.
    pub fn clear_expiry(&mut self) {
        if let Some(extra) = self.side.as_mut().and_then(|s| s.extra.as_mut()) {
            extra.expires_at_ms = None;
            extra.on_expire = OnExpire::Dead;
        }
    }

    /// Remembers a failed attempt and its error.
    pub fn push_failure(&mut self, now: Millis, outcome: &str, error: Option<String>) {
        let started_at_ms = self.updated_at_ms();
        let extra = self.extra_mut();
        let attempt = Attempt {
            started_at_ms,
            ended_at_ms: now,
            outcome: outcome.to_owned(),
            error,
        };
        attempt.remember(&mut extra.history, &mut extra.last_error);
    }

    /// The receipt as consumers see it.
    pub fn receipt_text(&self) -> String {
        format_receipt(self.receipt())
    }

    /// The delivery handed to a consumer for the current attempt.
    pub fn delivery(&self, topic: &str) -> Delivery {
        Delivery {
            id: self.id().to_owned(),
            topic: topic.to_owned(),
            body: self.body().to_vec(),
            priority: self.priority,
            retries: self.retries(),
            receipt: self.receipt_text(),
            due_ms: self.due_ms,
            ttr_ms: self.ttr_ms(),
            trace: self.trace().cloned(),
            key: self.key().map(str::to_owned),
        }
    }

    /// The full view of the task.
    pub fn info(&self, topic: &str) -> TaskInfo {
        let extra = self.extra();
        let created_at_ms = self.created_at_ms();
        let deadline_ms = self.deadline_ms();
        TaskInfo {
            id: self.id().to_owned(),
            topic: topic.to_owned(),
            body: self.body().to_vec(),
            priority: self.priority,
            state: self.state,
            due_ms: self.due_ms,
            delay_ms: self.due_ms.saturating_sub(created_at_ms),
            ttr_ms: self.ttr_ms(),
            max_retries: self.max_retries().as_i64(),
            retries: self.retries(),
            created_at_ms,
            updated_at_ms: self.updated_at_ms(),
            backoff: extra.and_then(|e| e.backoff.clone()),
            deadline_ms: (deadline_ms != 0).then_some(deadline_ms),
            last_error: extra.and_then(|e| e.last_error.clone()),
            history: extra
                .map(|e| e.history.iter().cloned().collect())
                .unwrap_or_default(),
            trace: extra.and_then(|e| e.trace.clone()),
            expires_at_ms: extra.and_then(|e| e.expires_at_ms),
            on_expire: extra.map(|e| e.on_expire).unwrap_or_default(),
            key: self.key().map(str::to_owned),
        }
    }
}

/// Receipts are 16 lower-case hex digits.
pub(crate) fn format_receipt(receipt: u64) -> String {
    format!("{receipt:016x}")
}

/// A well-mixed 64-bit value from a counter (splitmix64), so receipts are not guessable from
/// one another and never repeat within a shard.
pub(crate) fn mix_receipt(counter: u64) -> u64 {
    // Zero means "no receipt"; splitmix is a bijection, so only one counter maps there.
    delayq_core::hash::splitmix64(counter).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_are_distinct_and_fixed_width() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            let r = format_receipt(mix_receipt(i));
            assert_eq!(r.len(), 16);
            assert!(seen.insert(r));
        }
        assert_eq!(format_receipt(255), "00000000000000ff");
    }

    #[test]
    fn records_stay_small() {
        // Most of the memory of a delayed task is its record (docs/design.md §6: <= 150 B a
        // task beyond the body); the const assertion beside `Record` holds the same bound.
        assert_eq!(std::mem::size_of::<Record>(), 64);
        assert_ne!(mix_receipt(0), 0, "zero means no receipt");
    }

    fn fields(data: Box<[u8]>, id_last: u8) -> RecordFields {
        RecordFields {
            topic: 0,
            data,
            id_last,
            priority: 0,
            seq: 0,
            state: State::Delayed,
            retries: 0,
            ttr_ms: 1,
            max_retries: MaxRetries::Limited(0),
            due_ms: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
            deadline_ms: 0,
            receipt: 0,
            key: None,
            extra: None,
        }
    }

    fn record_with(data: Box<[u8]>, id_last: u8) -> Record {
        Record::new(fields(data, id_last))
    }

    #[test]
    fn a_key_lives_in_the_side_box_without_the_extra_one() {
        let (data, id_last) = Record::pack("a", b"body").unwrap();
        let r = Record::new(RecordFields {
            key: Some("merchant-7".into()),
            // As older versions' logs decode: an empty extra beside the key.
            extra: Some(Box::default()),
            ..fields(data, id_last)
        });
        assert_eq!(r.key(), Some("merchant-7"));
        assert!(r.side.is_some());
        assert!(r.extra().is_none(), "an empty extra is none");
        assert_eq!(r.info("t").key.as_deref(), Some("merchant-7"));
        assert_eq!(r.delivery("t").key.as_deref(), Some("merchant-7"));
        // A plain record with an empty extra has no box at all.
        let (data, id_last) = Record::pack("b", b"body").unwrap();
        let r = Record::new(RecordFields {
            extra: Some(Box::default()),
            ..fields(data, id_last)
        });
        assert!(r.side.is_none());
    }

    #[test]
    fn what_only_some_records_need_goes_with_its_box() {
        let (data, id_last) = Record::pack("a", b"body").unwrap();
        let mut r = record_with(data, id_last);
        assert!(r.side.is_none(), "a plain delayed task has no side box");
        // A receipt, a deadline, a timer, an extra and a wide ttr each bring the box; it goes
        // when the last of them does.
        r.set_receipt(7);
        r.set_deadline_ms(9);
        let timer = {
            let mut wheel = delayq_core::wheel::Wheel::new(0);
            wheel.insert(5, ())
        };
        r.set_timer(timer);
        assert_eq!(
            (r.receipt(), r.deadline_ms(), r.timer()),
            (7, 9, Some(timer))
        );
        r.set_receipt(0);
        r.set_deadline_ms(0);
        assert!(r.side.is_some());
        assert_eq!(r.take_timer(), Some(timer));
        assert!(r.side.is_none());
        r.extra_mut().last_error = Some("e".into());
        assert!(r.extra().is_some());
        r.set_extra(None);
        assert!(r.side.is_none());
        for ttr in [1, u64::from(u32::MAX) - 1, u64::from(u32::MAX), u64::MAX] {
            r.set_ttr_ms(ttr);
            assert_eq!(r.ttr_ms(), ttr);
            assert_eq!(r.side.is_some(), ttr >= u64::from(u32::MAX), "{ttr}");
        }
        r.set_ttr_ms(30_000);
        assert!(r.side.is_none());
    }

    #[test]
    fn narrow_fields_hold_every_value_and_wide_ones_take_the_box() {
        let (data, id_last) = Record::pack("a", b"body").unwrap();
        let created = 1_800_000_000_000;
        let mut r = Record::new(RecordFields {
            created_at_ms: created,
            updated_at_ms: created,
            ..fields(data, id_last)
        });
        assert!(r.side.is_none());
        // (value, whether it needs the box)
        for (retries, wide) in [(0, false), (254, false), (255, true), (u32::MAX, true)] {
            r.set_retries(retries);
            assert_eq!(
                (r.retries(), r.side.is_some()),
                (retries, wide),
                "{retries}"
            );
        }
        r.set_retries(3);
        for (max, wide) in [
            (MaxRetries::Limited(0), false),
            (MaxRetries::Limited(3), false),
            (MaxRetries::Limited(253), false),
            (MaxRetries::Limited(254), true),
            (MaxRetries::Limited(255), true),
            (MaxRetries::Limited(u32::MAX), true),
            (MaxRetries::Unlimited, false),
        ] {
            r.set_max_retries(max);
            assert_eq!((r.max_retries(), r.side.is_some()), (max, wide), "{max:?}");
        }
        let day = 86_400_000;
        let max = u64::from(i32::MAX.unsigned_abs());
        for (updated, wide) in [
            (created, false),
            (created + 1, false),
            // An add's update reading can be a millisecond before its creation reading.
            (created - 1, false),
            (created + 24 * day, false),
            (created - 24 * day, false),
            (created + max, false),
            (created - max, false),
            (created + max + 1, true),
            (created - max - 1, true),
            (created + 25 * day, true),
            (0, true),
            (u64::MAX, true),
        ] {
            r.set_updated_at_ms(updated);
            assert_eq!(
                (r.updated_at_ms(), r.side.is_some()),
                (updated, wide),
                "{updated}"
            );
        }
        // Wide values side by side: each narrows on its own; the box goes with the last.
        r.set_retries(1_000);
        r.set_max_retries(MaxRetries::Limited(1_000));
        r.set_ttr_ms(u64::MAX);
        r.set_receipt(5);
        for step in 0..5 {
            assert!(r.side.is_some(), "{step}");
            match step {
                0 => r.set_updated_at_ms(created + 7),
                1 => r.set_retries(2),
                2 => r.set_max_retries(MaxRetries::Limited(2)),
                3 => r.set_ttr_ms(1),
                _ => r.set_receipt(0),
            }
        }
        assert!(r.side.is_none());
        assert_eq!(
            (r.updated_at_ms(), r.retries(), r.max_retries(), r.ttr_ms()),
            (created + 7, 2, MaxRetries::Limited(2), 1)
        );
        assert_eq!(r, {
            let (data, id_last) = Record::pack("a", b"body").unwrap();
            Record::new(RecordFields {
                created_at_ms: created,
                updated_at_ms: created + 7,
                retries: 2,
                max_retries: MaxRetries::Limited(2),
                ..fields(data, id_last)
            })
        });
    }

    #[test]
    fn times_keep_48_bits() {
        for ms in [0, 1, 1_800_000_000_005, u64::from(u32::MAX) + 1, SEQ_MAX] {
            let (hi, lo) = pack48(ms);
            assert_eq!(unpack48(hi, lo), ms);
        }
        let (hi, lo) = pack48(u64::MAX);
        assert_eq!(
            unpack48(hi, lo),
            SEQ_MAX,
            "past the year 10889: the last 48-bit time"
        );
        let (data, id_last) = Record::pack("a", b"").unwrap();
        let mut r = Record::new(RecordFields {
            created_at_ms: 1_799_999_000_000,
            updated_at_ms: 1_800_000_000_005,
            due_ms: u64::MAX,
            ..fields(data, id_last)
        });
        assert_eq!(
            (r.created_at_ms(), r.updated_at_ms(), r.due_ms),
            (1_799_999_000_000, 1_800_000_000_005, u64::MAX)
        );
        r.set_updated_at_ms(1_800_000_000_006);
        assert_eq!(r.updated_at_ms(), 1_800_000_000_006);
    }

    #[test]
    fn id_and_body_share_one_allocation() {
        for (id, body) in [
            ("a", &b""[..]),
            ("order-1", b"{\"x\":1}"),
            ("\u{e9}t\u{e9}", b"\xff\x00"),
        ] {
            let (data, id_last) = Record::pack(id, body).unwrap();
            assert_eq!(data.len(), id.len() + body.len());
            assert_eq!(usize::from(id_last) + 1, id.len());
        }
        let id = "i".repeat(MAX_ID_BYTES);
        let (data, id_last) = Record::pack(&id, b"body").unwrap();
        let mut r = record_with(data, id_last);
        assert_eq!((r.id(), r.body()), (id.as_str(), &b"body"[..]));
        (r.data, r.id_last) = Record::pack("a", b"").unwrap();
        assert_eq!((r.id(), r.body()), ("a", &b""[..]));
        for bad in [String::new(), "i".repeat(MAX_ID_BYTES + 1)] {
            assert_eq!(Record::pack(&bad, b"").unwrap_err(), BadIdLength);
        }
    }
}
