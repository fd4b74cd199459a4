//! One task's record as the engine keeps it in memory, kept small: the common case (a
//! delayed task with no backoff, no failures and no trace context) carries one heap
//! allocation, its id and body together; what only some tasks need lives behind one optional
//! box.

use std::collections::VecDeque;

use delayq_core::wheel::TimerKey;
use delayq_core::{
    Attempt, Backoff, Delivery, MaxRetries, Millis, OnExpire, State, TaskInfo, TraceContext,
};

/// A task's record. Its fields are the engine's business: outside the crate a record is only
/// what a [`Journal`](super::Journal) is handed to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Index of the topic in its shard.
    pub(crate) topic: u32,
    /// The caller's id, then the payload, in one allocation: one allocation a task instead of
    /// two, and one pointer in the record instead of two (see [`Record::pack`]).
    pub(crate) data: Box<[u8]>,
    /// The id's length less one: ids are 1 to 256 bytes (docs/design.md §1), and one byte
    /// here keeps the record at 104 bytes.
    pub(crate) id_last: u8,
    /// Lower first (docs/design.md §2 rule 11).
    pub(crate) priority: u32,
    /// The low 32 bits of the insertion sequence (see [`Record::seq`]).
    pub(crate) seq_lo: u32,
    /// The high 16 bits of the insertion sequence. Split so the record stays within the
    /// padding it already had: 48 bits outlast any engine (2.8e14 adds).
    pub(crate) seq_hi: u16,
    /// The state.
    pub(crate) state: State,
    /// Redeliveries so far.
    pub(crate) retries: u32,
    /// Time to run.
    pub(crate) ttr_ms: u64,
    /// Redeliveries allowed, packed into four bytes.
    pub(crate) max_retries: PackedMaxRetries,
    /// When the task is (or was) due.
    pub(crate) due_ms: Millis,
    /// When the task was added.
    pub(crate) created_at_ms: Millis,
    /// When the task last changed state (for ACTIVE: when the attempt started).
    pub(crate) updated_at_ms: Millis,
    /// ACTIVE: the ttr deadline; FINISHED/CANCELLED: when the record goes; otherwise 0.
    pub(crate) deadline_ms: Millis,
    /// The receipt of the current attempt (ACTIVE), else 0.
    pub(crate) receipt: u64,
    /// The record's timer in the shard's wheel, if it has one.
    pub(crate) timer: Option<TimerKey>,
    /// What only some tasks need.
    pub(crate) extra: Option<Box<Extra>>,
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
    /// The flow-control key (docs/design.md §11).
    pub(crate) key: Option<Box<str>>,
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
        (self.updated_at_ms, self.seq())
    }

    /// The retry schedule, if any.
    pub fn backoff(&self) -> Option<&Backoff> {
        self.extra.as_ref().and_then(|e| e.backoff.as_ref())
    }

    /// The trace context the task was added with, if any.
    pub fn trace(&self) -> Option<&TraceContext> {
        self.extra.as_ref().and_then(|e| e.trace.as_ref())
    }

    /// When the task expires unless handed out before, if it has an expiry.
    pub fn expires_at_ms(&self) -> Option<Millis> {
        self.extra.as_ref().and_then(|e| e.expires_at_ms)
    }

    /// The task's flow-control key, if it has one.
    pub fn key(&self) -> Option<&str> {
        self.extra.as_ref().and_then(|e| e.key.as_deref())
    }

    /// What its expiry does.
    pub fn on_expire(&self) -> OnExpire {
        self.extra.as_ref().map(|e| e.on_expire).unwrap_or_default()
    }

    /// Forgets the expiry: an operator's requeue or kick of a DEAD task brings it back for good.
    pub fn clear_expiry(&mut self) {
        if let Some(extra) = self.extra.as_mut() {
            extra.expires_at_ms = None;
            extra.on_expire = OnExpire::Dead;
        }
    }

    /// Remembers a failed attempt and its error.
    pub fn push_failure(&mut self, now: Millis, outcome: &str, error: Option<String>) {
        let extra = self.extra.get_or_insert_with(Box::default);
        let attempt = Attempt {
            started_at_ms: self.updated_at_ms,
            ended_at_ms: now,
            outcome: outcome.to_owned(),
            error,
        };
        attempt.remember(&mut extra.history, &mut extra.last_error);
    }

    /// The receipt as consumers see it.
    pub fn receipt_text(&self) -> String {
        format_receipt(self.receipt)
    }

    /// The delivery handed to a consumer for the current attempt.
    pub fn delivery(&self, topic: &str) -> Delivery {
        Delivery {
            id: self.id().to_owned(),
            topic: topic.to_owned(),
            body: self.body().to_vec(),
            priority: self.priority,
            retries: self.retries,
            receipt: self.receipt_text(),
            due_ms: self.due_ms,
            ttr_ms: self.ttr_ms,
            trace: self.trace().cloned(),
        }
    }

    /// The full view of the task.
    pub fn info(&self, topic: &str) -> TaskInfo {
        let extra = self.extra.as_deref();
        TaskInfo {
            id: self.id().to_owned(),
            topic: topic.to_owned(),
            body: self.body().to_vec(),
            priority: self.priority,
            state: self.state,
            due_ms: self.due_ms,
            delay_ms: self.due_ms.saturating_sub(self.created_at_ms),
            ttr_ms: self.ttr_ms,
            max_retries: self.max_retries.get().as_i64(),
            retries: self.retries,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            backoff: extra.and_then(|e| e.backoff.clone()),
            deadline_ms: (self.deadline_ms != 0).then_some(self.deadline_ms),
            last_error: extra.and_then(|e| e.last_error.clone()),
            history: extra
                .map(|e| e.history.iter().cloned().collect())
                .unwrap_or_default(),
            trace: extra.and_then(|e| e.trace.clone()),
            expires_at_ms: extra.and_then(|e| e.expires_at_ms),
            on_expire: extra.map(|e| e.on_expire).unwrap_or_default(),
            key: extra.and_then(|e| e.key.as_deref().map(str::to_owned)),
        }
    }
}

/// [`MaxRetries`] in four bytes instead of eight: `u32::MAX` stands for no limit (a limit of
/// 4 294 967 295 redeliveries is no limit in practice). Records are the bulk of the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedMaxRetries(u32);

impl PackedMaxRetries {
    /// The unpacked value.
    pub fn get(self) -> MaxRetries {
        match self.0 {
            u32::MAX => MaxRetries::Unlimited,
            n => MaxRetries::Limited(n),
        }
    }
}

impl From<MaxRetries> for PackedMaxRetries {
    fn from(value: MaxRetries) -> Self {
        PackedMaxRetries(match value {
            MaxRetries::Limited(n) => n,
            MaxRetries::Unlimited => u32::MAX,
        })
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
        // task beyond the body).
        assert!(
            std::mem::size_of::<Record>() <= 104,
            "{}",
            std::mem::size_of::<Record>()
        );
        for m in [
            MaxRetries::Limited(0),
            MaxRetries::Limited(3),
            MaxRetries::Unlimited,
        ] {
            assert_eq!(PackedMaxRetries::from(m).get(), m);
        }
        assert_ne!(mix_receipt(0), 0, "zero means no receipt");
    }

    fn record_with(data: Box<[u8]>, id_last: u8) -> Record {
        Record {
            topic: 0,
            data,
            id_last,
            priority: 0,
            seq_lo: 0,
            seq_hi: 0,
            state: State::Delayed,
            retries: 0,
            ttr_ms: 1,
            max_retries: MaxRetries::Limited(0).into(),
            due_ms: 0,
            created_at_ms: 0,
            updated_at_ms: 0,
            deadline_ms: 0,
            receipt: 0,
            timer: None,
            extra: None,
        }
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
