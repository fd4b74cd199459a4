//! The binary form of the embedded backend's log and snapshot records.
//!
//! Kinds of record: `Put` (a task's whole record after a change), `Remove` (a task's record
//! is gone), `Pause` (a topic's pause changed), `MetaPut`/`MetaDelete` (the meta store) and
//! `JobIds` (a block of job ids reserved). Integers are LEB128 varints, strings and bytes are a
//! varint length and the bytes. Decoding never panics: damaged input is a [`CodecError`]
//! naming what was being read.
//!
//! ```text
//! Put v1:     0x01 topic id body state retries ttr max_retries(zigzag) due created updated
//!             deadline receipt(u64 LE) extra?(0|1 [backoff? last_error? history])
//! Remove:     0x02 topic id
//! Put v2:     0x03 <as Put v1 up to receipt> priority seq extra?(...)
//! Pause:      0x04 topic 0 (not paused) | 1 (until resumed) | 2 until
//! MetaPut:    0x05 namespace key value
//! MetaDelete: 0x06 namespace key
//! JobIds:     0x07 reserved
//! Put v3:     0x08 <as Put v2 up to seq> traceparent tracestate? extra?(...)
//! Put v4:     0x09 <as Put v2 up to seq> trace?(0 | 1 traceparent tracestate?) expires_at
//!             on_expire(0 dead | 1 drop) extra?(...)
//! Put v5:     0x0A <as Put v2 up to seq> trace?(0 | 1 traceparent tracestate?)
//!             expiry?(0 | 1 expires_at on_expire) key extra?(...)
//! ```
//!
//! Format version 6 writes `Put v5` for a task with a flow-control key, and otherwise what
//! format 5 wrote.
//!
//! Format version 5 writes `Put v4` for a task with an expiry, and otherwise what format 4
//! wrote (so a task without an expiry costs nothing more on disk).
//!
//! Format version 4 writes `Put v3` for a task with a trace context and `Put v2` for one
//! without (the same bytes as format 3, so untraced tasks cost nothing more on disk).
//!
//! Format version 2 writes `Put v2` and the kinds after it; it still reads `Put v1` (written
//! by version 1), whose tasks get the default priority and an insertion sequence from replay
//! order (docs/storage.md, "Upgrading a data directory").

use std::collections::VecDeque;

use delayq_core::{Attempt, Backoff, MaxRetries, OnExpire, Pause, State, TraceContext};

use crate::storage::engine::record::{Extra, Record, RecordFields};

const PUT_V1: u8 = 1;
const REMOVE: u8 = 2;
const PUT: u8 = 3;
const PAUSE: u8 = 4;
const META_PUT: u8 = 5;
const META_DELETE: u8 = 6;
const JOB_IDS: u8 = 7;
const PUT_TRACED: u8 = 8;
const PUT_EXPIRING: u8 = 9;
const PUT_KEYED: u8 = 10;

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change<'a> {
    /// The task's record is now this (its `topic` index is meaningless here).
    Put {
        /// The topic.
        topic: &'a str,
        /// The record.
        record: Record,
    },
    /// The task's record is gone.
    Remove {
        /// The topic.
        topic: &'a str,
        /// The id.
        id: &'a str,
    },
    /// The topic's pause is now this.
    Pause {
        /// The topic.
        topic: &'a str,
        /// The pause.
        pause: Pause,
    },
    /// A meta value is stored.
    MetaPut {
        /// The namespace.
        namespace: &'a str,
        /// The key.
        key: &'a str,
        /// The value.
        value: &'a [u8],
    },
    /// A meta value is gone.
    MetaDelete {
        /// The namespace.
        namespace: &'a str,
        /// The key.
        key: &'a str,
    },
    /// Job ids up to this may have been handed out.
    JobIds {
        /// The highest reserved id.
        reserved: u64,
    },
}

/// Damaged or unknown bytes in a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {what} at byte {offset} of a {len}-byte record")]
pub struct CodecError {
    /// What was being read.
    pub what: &'static str,
    /// Where in the record.
    pub offset: usize,
    /// The record's length.
    pub len: usize,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_bytes(out, s.as_bytes());
}

/// A length-prefixed byte string; a text is the same with UTF-8 bytes, so bodies written as
/// text by version 1 read back as bytes.
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => {
            out.push(1);
            put_str(out, s);
        }
        None => out.push(0),
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends the encoding of any decoded `change` to `out`: what [`decode`] read, written back.
pub fn encode(out: &mut Vec<u8>, change: &Change<'_>) {
    match change {
        Change::Put { topic, record } => encode_put(out, topic, record),
        Change::Remove { topic, id } => encode_remove(out, topic, id),
        Change::Pause { topic, pause } => encode_pause(out, topic, *pause),
        Change::MetaPut {
            namespace,
            key,
            value,
        } => encode_meta_put(out, namespace, key, value),
        Change::MetaDelete { namespace, key } => encode_meta_delete(out, namespace, key),
        Change::JobIds { reserved } => encode_job_ids(out, *reserved),
    }
}

/// Appends the `Put` form of `record` of `topic` to `out`.
pub fn encode_put(out: &mut Vec<u8>, topic: &str, r: &Record) {
    let trace = r.trace();
    let expiry = r.expires_at_ms();
    let key = r.key();
    out.push(match (key, expiry, trace) {
        (Some(_), _, _) => PUT_KEYED,
        (None, Some(_), _) => PUT_EXPIRING,
        (None, None, Some(_)) => PUT_TRACED,
        (None, None, None) => PUT,
    });
    put_str(out, topic);
    put_str(out, r.id());
    put_bytes(out, r.body());
    out.push(r.state.code());
    put_varint(out, u64::from(r.retries()));
    put_varint(out, r.ttr_ms());
    put_varint(out, zigzag(r.max_retries().as_i64()));
    put_varint(out, r.due_ms);
    put_varint(out, r.created_at_ms());
    put_varint(out, r.updated_at_ms());
    put_varint(out, r.deadline_ms());
    out.extend_from_slice(&r.receipt().to_le_bytes());
    put_varint(out, u64::from(r.priority));
    put_varint(out, r.seq());
    if let Some(key) = key {
        put_trace_flagged(out, trace);
        match expiry {
            Some(expires_at_ms) => {
                out.push(1);
                put_expiry(out, expires_at_ms, r.on_expire());
            }
            None => out.push(0),
        }
        put_str(out, key);
    } else {
        put_unkeyed_tail(out, expiry, trace, r.on_expire());
    }
    put_extra(out, r.extra());
}

/// A trace context behind a flag byte (`Put v4` and `v5`).
fn put_trace_flagged(out: &mut Vec<u8>, trace: Option<&TraceContext>) {
    match trace {
        Some(trace) => {
            out.push(1);
            put_str(out, trace.traceparent());
            put_opt_str(out, trace.tracestate());
        }
        None => out.push(0),
    }
}

fn put_expiry(out: &mut Vec<u8>, expires_at_ms: u64, on_expire: OnExpire) {
    put_varint(out, expires_at_ms);
    out.push(match on_expire {
        OnExpire::Dead => 0,
        OnExpire::Drop => 1,
    });
}

/// What `Put v2`, `v3` and `v4` carry after the sequence.
fn put_unkeyed_tail(
    out: &mut Vec<u8>,
    expiry: Option<u64>,
    trace: Option<&TraceContext>,
    on_expire: OnExpire,
) {
    match (expiry, trace) {
        (Some(expires_at_ms), trace) => {
            put_trace_flagged(out, trace);
            put_expiry(out, expires_at_ms, on_expire);
        }
        (None, Some(trace)) => {
            put_str(out, trace.traceparent());
            put_opt_str(out, trace.tracestate());
        }
        (None, None) => {}
    }
}

/// The rarely used part of a record, behind a flag byte.
fn put_extra(out: &mut Vec<u8>, extra: Option<&Extra>) {
    match extra {
        None => out.push(0),
        Some(extra) => {
            out.push(1);
            let backoff = extra
                .backoff
                .as_ref()
                .map(|b| serde_json::to_string(b).expect("backoff serializes"));
            put_opt_str(out, backoff.as_deref());
            put_opt_str(out, extra.last_error.as_deref());
            put_varint(out, extra.history.len() as u64);
            for a in &extra.history {
                put_varint(out, a.started_at_ms);
                put_varint(out, a.ended_at_ms);
                put_str(out, &a.outcome);
                put_opt_str(out, a.error.as_deref());
            }
        }
    }
}

/// Appends the `Pause` form of a topic's pause to `out`.
pub fn encode_pause(out: &mut Vec<u8>, topic: &str, pause: Pause) {
    out.push(PAUSE);
    put_str(out, topic);
    match (pause.paused, pause.until_ms) {
        (false, _) => out.push(0),
        (true, None) => out.push(1),
        (true, Some(until)) => {
            out.push(2);
            put_varint(out, until);
        }
    }
}

/// Appends the `MetaPut` form to `out`.
pub fn encode_meta_put(out: &mut Vec<u8>, namespace: &str, key: &str, value: &[u8]) {
    out.push(META_PUT);
    put_str(out, namespace);
    put_str(out, key);
    put_bytes(out, value);
}

/// Appends the `MetaDelete` form to `out`.
pub fn encode_meta_delete(out: &mut Vec<u8>, namespace: &str, key: &str) {
    out.push(META_DELETE);
    put_str(out, namespace);
    put_str(out, key);
}

/// Appends the `JobIds` form to `out`.
pub fn encode_job_ids(out: &mut Vec<u8>, reserved: u64) {
    out.push(JOB_IDS);
    put_varint(out, reserved);
}

/// Appends the `Remove` form for (topic, id) to `out`.
pub fn encode_remove(out: &mut Vec<u8>, topic: &str, id: &str) {
    out.push(REMOVE);
    put_str(out, topic);
    put_str(out, id);
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, what: &'static str) -> CodecError {
        CodecError {
            what,
            offset: self.pos,
            len: self.bytes.len(),
        }
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, CodecError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| self.err(what))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self, what: &'static str) -> Result<u64, CodecError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err(what))
    }

    fn str(&mut self, what: &'static str) -> Result<&'a str, CodecError> {
        let start = self.pos;
        let b = self.bytes(what)?;
        std::str::from_utf8(b).map_err(|_| {
            self.pos = start;
            self.err(what)
        })
    }

    fn bytes(&mut self, what: &'static str) -> Result<&'a [u8], CodecError> {
        let len = usize::try_from(self.varint(what)?).map_err(|_| self.err(what))?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| self.err(what))?;
        let b = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(b)
    }

    fn opt_str(&mut self, what: &'static str) -> Result<Option<&'a str>, CodecError> {
        match self.u8(what)? {
            0 => Ok(None),
            1 => self.str(what).map(Some),
            _ => Err(self.err(what)),
        }
    }

    fn flag(&mut self, what: &'static str) -> Result<bool, CodecError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.err(what)),
        }
    }

    fn end(&self) -> Result<(), CodecError> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(self.err("end of record"))
        }
    }

    fn u64_le(&mut self, what: &'static str) -> Result<u64, CodecError> {
        let end = self.pos + 8;
        let bytes = self
            .bytes
            .get(self.pos..end)
            .ok_or_else(|| self.err(what))?;
        self.pos = end;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }
}

/// Decodes one record.
pub fn decode(bytes: &[u8]) -> Result<Change<'_>, CodecError> {
    let mut r = Reader { bytes, pos: 0 };
    let kind = r.u8("record kind")?;
    match kind {
        PUT_V1 | PUT | PUT_TRACED | PUT_EXPIRING | PUT_KEYED => decode_put(&mut r, kind),
        PAUSE => {
            let topic = r.str("topic")?;
            let pause = decode_pause(&mut r)?;
            r.end()?;
            Ok(Change::Pause { topic, pause })
        }
        META_PUT => {
            let namespace = r.str("meta namespace")?;
            let key = r.str("meta key")?;
            let value = r.bytes("meta value")?;
            r.end()?;
            Ok(Change::MetaPut {
                namespace,
                key,
                value,
            })
        }
        META_DELETE => {
            let namespace = r.str("meta namespace")?;
            let key = r.str("meta key")?;
            r.end()?;
            Ok(Change::MetaDelete { namespace, key })
        }
        JOB_IDS => {
            let reserved = r.varint("job ids")?;
            r.end()?;
            Ok(Change::JobIds { reserved })
        }
        REMOVE => {
            let topic = r.str("topic")?;
            let id = r.str("id")?;
            r.end()?;
            Ok(Change::Remove { topic, id })
        }
        _ => Err(r.err("record kind")),
    }
}

/// The body of a `Put` record of any version (`kind` says which), after its kind byte.
fn decode_put<'a>(r: &mut Reader<'a>, kind: u8) -> Result<Change<'a>, CodecError> {
    let topic = r.str("topic")?;
    let id = r.str("id")?;
    let body = r.bytes("body")?;
    let state = State::from_code(r.u8("state")?).ok_or_else(|| r.err("state"))?;
    let retries = u32::try_from(r.varint("retries")?).map_err(|_| r.err("retries"))?;
    let ttr_ms = r.varint("ttr")?;
    let max_retries = MaxRetries::try_from(unzigzag(r.varint("max_retries")?))
        .map_err(|_| r.err("max_retries"))?;
    let due_ms = r.varint("due")?;
    let created_at_ms = r.varint("created")?;
    let updated_at_ms = r.varint("updated")?;
    let deadline_ms = r.varint("deadline")?;
    let receipt = r.u64_le("receipt")?;
    let (priority, seq) = if kind != PUT_V1 {
        let priority = u32::try_from(r.varint("priority")?).map_err(|_| r.err("priority"))?;
        (priority, r.varint("sequence")?)
    } else {
        // Version 1 had no priority; the sequence comes from replay order.
        (delayq_core::DEFAULT_PRIORITY, 0)
    };
    let traced = match kind {
        PUT_TRACED => true,
        PUT_EXPIRING | PUT_KEYED => r.flag("trace flag")?,
        _ => false,
    };
    let trace = if traced {
        let traceparent = r.str("traceparent")?;
        let tracestate = r.opt_str("tracestate")?;
        Some(TraceContext::parse(traceparent, tracestate).map_err(|_| r.err("trace context"))?)
    } else {
        None
    };
    let expiring = match kind {
        PUT_EXPIRING => true,
        PUT_KEYED => r.flag("expiry flag")?,
        _ => false,
    };
    let expiry = if expiring {
        let expires_at_ms = r.varint("expires_at")?;
        let on_expire = match r.u8("on_expire")? {
            0 => OnExpire::Dead,
            1 => OnExpire::Drop,
            _ => return Err(r.err("on_expire")),
        };
        Some((expires_at_ms, on_expire))
    } else {
        None
    };
    let key = if kind == PUT_KEYED {
        Some(r.str("key")?)
    } else {
        None
    };
    let mut extra = decode_extra(r)?;
    r.end()?;
    if trace.is_some() {
        extra.get_or_insert_with(Box::default).trace = trace;
    }
    if let Some((expires_at_ms, on_expire)) = expiry {
        let extra = extra.get_or_insert_with(Box::default);
        extra.expires_at_ms = Some(expires_at_ms);
        extra.on_expire = on_expire;
    }
    let (data, id_last) = Record::pack(id, body).map_err(|_| r.err("id"))?;
    let record = Record::new(RecordFields {
        topic: 0,
        data,
        id_last,
        priority,
        seq,
        state,
        retries,
        ttr_ms,
        max_retries,
        due_ms,
        created_at_ms,
        updated_at_ms,
        deadline_ms,
        receipt,
        key: key.map(Box::from),
        extra,
    });
    Ok(Change::Put { topic, record })
}

/// The optional tail of a `Put`: backoff, last error and the history of attempts.
fn decode_extra(r: &mut Reader<'_>) -> Result<Option<Box<Extra>>, CodecError> {
    match r.u8("extra flag")? {
        0 => Ok(None),
        1 => {
            let backoff = match r.opt_str("backoff")? {
                Some(json) => {
                    Some(serde_json::from_str::<Backoff>(json).map_err(|_| r.err("backoff"))?)
                }
                None => None,
            };
            let last_error = r.opt_str("last error")?.map(str::to_owned);
            let n = r.varint("history length")?;
            let mut history = VecDeque::new();
            for _ in 0..n {
                history.push_back(Attempt {
                    started_at_ms: r.varint("attempt start")?,
                    ended_at_ms: r.varint("attempt end")?,
                    outcome: r.str("attempt outcome")?.to_owned(),
                    error: r.opt_str("attempt error")?.map(str::to_owned),
                });
            }
            Ok(Some(Box::new(Extra {
                backoff,
                last_error,
                history,
                ..Extra::default()
            })))
        }
        _ => Err(r.err("extra flag")),
    }
}

/// A pause after its topic: 0 (not paused), 1 (until resumed) or 2 and its end.
fn decode_pause(r: &mut Reader<'_>) -> Result<Pause, CodecError> {
    Ok(match r.u8("pause")? {
        0 => Pause::default(),
        1 => Pause {
            paused: true,
            until_ms: None,
        },
        2 => Pause {
            paused: true,
            until_ms: Some(r.varint("pause end")?),
        },
        _ => return Err(r.err("pause")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(extra: Option<Extra>) -> Record {
        record_with(None, extra)
    }

    fn record_with(key: Option<&str>, extra: Option<Extra>) -> Record {
        let (data, id_last) = Record::pack("order-1", "{\"x\":\"é\"}".as_bytes()).unwrap();
        Record::new(RecordFields {
            topic: 0,
            data,
            id_last,
            priority: 7,
            seq: 0x9a_1234_5678,
            state: State::Active,
            retries: 2,
            ttr_ms: 30_000,
            max_retries: MaxRetries::Unlimited,
            due_ms: 1_800_000_000_000,
            created_at_ms: 1_799_999_000_000,
            updated_at_ms: 1_800_000_000_005,
            deadline_ms: 1_800_000_030_005,
            receipt: u64::MAX - 3,
            key: key.map(Box::from),
            extra: extra.map(Box::new),
        })
    }

    fn wide_ttr(mut r: Record, ttr_ms: u64) -> Record {
        r.set_ttr_ms(ttr_ms);
        r
    }

    fn wide_counts(mut r: Record, retries: u32, max_retries: MaxRetries, updated: u64) -> Record {
        let (data, id_last) = Record::pack(r.id(), r.body()).unwrap();
        r = Record::new(RecordFields {
            topic: 0,
            data,
            id_last,
            priority: r.priority,
            seq: r.seq(),
            state: r.state,
            retries,
            ttr_ms: r.ttr_ms(),
            max_retries,
            due_ms: r.due_ms,
            created_at_ms: r.created_at_ms(),
            updated_at_ms: updated,
            deadline_ms: r.deadline_ms(),
            receipt: r.receipt(),
            key: None,
            extra: None,
        });
        r
    }

    fn plain_delayed(mut r: Record) -> Record {
        r.state = State::Delayed;
        r.set_receipt(0);
        r.set_deadline_ms(0);
        r
    }

    #[test]
    fn round_trips() {
        let full = Extra {
            backoff: Some(Backoff::Schedule {
                ms: vec![120_000, 600_000],
            }),
            last_error: Some("boom".into()),
            history: VecDeque::from([Attempt {
                started_at_ms: 1,
                ended_at_ms: 2,
                outcome: "released".into(),
                error: None,
            }]),
            ..Extra::default()
        };
        let traced = |full: &Extra, state: Option<&str>| Extra {
            trace: Some(
                TraceContext::parse(
                    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                    state,
                )
                .unwrap(),
            ),
            ..full.clone()
        };
        let only_trace = Extra {
            trace: traced(&full, None).trace,
            ..Extra::default()
        };
        let expiring = |extra: Extra, on_expire| Extra {
            expires_at_ms: Some(1_800_000_060_000),
            on_expire,
            ..extra
        };
        let keyed = |extra: Option<Extra>| record_with(Some("merchant-7"), extra);
        for r in [
            keyed(None),
            keyed(Some(expiring(full.clone(), OnExpire::Drop))),
            keyed(Some(traced(&full, Some("a=1")))),
            keyed(Some(expiring(only_trace.clone(), OnExpire::Dead))),
            record(Some(expiring(Extra::default(), OnExpire::Dead))),
            record(Some(expiring(full.clone(), OnExpire::Drop))),
            record(Some(expiring(traced(&full, Some("a=1")), OnExpire::Dead))),
            record(Some(expiring(only_trace.clone(), OnExpire::Drop))),
            record(None),
            record(Some(Extra::default())),
            record(Some(traced(&full, Some("a=1,b=2")))),
            record(Some(traced(&full, None))),
            record(Some(only_trace)),
            record(Some(full)),
            // What the in-memory record keeps apart: a ttr too wide for its four bytes, and a
            // delayed task with no receipt, deadline or extra.
            wide_ttr(record(None), u64::from(u32::MAX)),
            wide_ttr(record(None), u64::MAX),
            plain_delayed(record(None)),
            wide_counts(record(None), 255, MaxRetries::Limited(254), 0),
            wide_counts(
                record(None),
                u32::MAX,
                MaxRetries::Limited(u32::MAX),
                u64::MAX,
            ),
            wide_counts(
                record(None),
                254,
                MaxRetries::Limited(253),
                1_700_000_000_000,
            ),
        ] {
            let mut buf = Vec::new();
            encode_put(&mut buf, "orders", &r);
            assert_eq!(
                decode(&buf),
                Ok(Change::Put {
                    topic: "orders",
                    record: r
                })
            );
        }
        let mut buf = Vec::new();
        encode_remove(&mut buf, "t", "i");
        assert_eq!(
            decode(&buf),
            Ok(Change::Remove {
                topic: "t",
                id: "i"
            })
        );
    }

    #[test]
    fn zigzag_round_trips() {
        for v in [0i64, -1, 1, 3, i64::from(u32::MAX), i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn damaged_records_are_errors_never_panics() {
        let expiring = Extra {
            expires_at_ms: Some(1_800_000_060_000),
            on_expire: OnExpire::Drop,
            ..Extra::default()
        };
        for r in [
            record(None),
            record(Some(expiring.clone())),
            record_with(Some("merchant-7"), Some(expiring)),
        ] {
            let mut good = Vec::new();
            encode_put(&mut good, "orders", &r);
            // Every truncation, and every single-byte corruption, decodes to an error or to
            // some record, but never panics.
            for cut in 0..good.len() {
                assert!(decode(&good[..cut]).is_err(), "truncated at {cut}");
            }
            for i in 0..good.len() {
                for flip in [0x01u8, 0x80, 0xff] {
                    let mut bad = good.clone();
                    bad[i] ^= flip;
                    let _ = decode(&bad);
                }
            }
        }
        let table: [(&[u8], &str); 4] = [
            (&[], "record kind"),
            (&[11], "record kind"),
            (&[REMOVE, 2, b'a'], "topic"),
            (&[REMOVE, 1, 0xff, 1, b'a'], "topic"),
        ];
        for (bytes, what) in table {
            assert_eq!(decode(bytes).unwrap_err().what, what, "{bytes:?}");
        }
    }
}
