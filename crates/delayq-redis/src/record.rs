//! The packed record format, both ways: [`Record::encode`] writes what `scripts/lib.lua`'s
//! `load` reads, [`Record::parse`] reads what its `save` writes, and [`task_info`] turns a
//! record and its extras into the view of `delayq_core`.
//!
//! A record is one string: a header of comma-separated fields, a newline, then the body.
//! Header fields, in order: state code, due, created, updated (empty: created), ttr, max
//! retries (-1: no limit), retries (empty: 0), deadline (ACTIVE: ttr deadline;
//! FINISHED/CANCELLED: end of retention; empty: none), receipt (ACTIVE; empty: none),
//! priority (empty: 1024), insertion number (16 hex digits; empty: 0), and only for a task
//! with a trace context, that context: the `traceparent`, then for a `tracestate` a space and
//! the tracestate with its commas written as tabs (a checked tracestate holds neither tab nor
//! comma otherwise, so the header stays one comma-separated line; `lib.lua` keeps the field
//! as an opaque string). Records of the previous versions end after the receipt or the
//! insertion number: they read as priority 1024, insertion number 0, no trace context. The
//! body is last and unescaped: it may hold commas and newlines.
//!
//! Extras (only failing tasks or tasks with a backoff have them) are three parts separated by
//! NUL bytes: the backoff as JSON (empty: none), the last error as a JSON string (empty:
//! none), the history (one JSON object per line, oldest first). The scripts write them; the
//! add script writes the backoff the caller encoded with serde.

use std::fmt::Write as _;

use delayq::core::{DEFAULT_PRIORITY, Priority};
use delayq::{Attempt, Backoff, Millis, State, TaskInfo, TaskSpec, TraceContext};

use crate::error::BackendError;

/// A record's header and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub state: State,
    pub due_ms: Millis,
    pub created_at_ms: Millis,
    pub updated_at_ms: Millis,
    pub ttr_ms: u64,
    pub max_retries: i64,
    pub retries: u32,
    /// ACTIVE: the ttr deadline; FINISHED/CANCELLED: the end of retention; else 0.
    pub deadline_ms: Millis,
    /// ACTIVE: the current attempt's receipt; else empty.
    pub receipt: String,
    /// Lower first (rule 11).
    pub priority: Priority,
    /// The insertion number, given by the adding instance (0: a record of the previous
    /// version).
    pub seq: u64,
    /// The producer's trace context, if the task was added with one.
    pub trace: Option<TraceContext>,
    /// Any bytes: the header is text, the body after its newline is not read as text.
    pub body: Vec<u8>,
}

impl Record {
    /// The record of a new task with insertion number `seq`, in the state it enters at
    /// `now`: READY when due, else DELAYED.
    pub fn new(t: &TaskSpec, now: Millis, seq: u64) -> Record {
        Record {
            state: delayq::core::lifecycle::scheduled_state(t.due_ms, now),
            due_ms: t.due_ms,
            created_at_ms: t.created_at_ms,
            updated_at_ms: t.created_at_ms,
            ttr_ms: t.ttr_ms,
            max_retries: t.max_retries.as_i64(),
            retries: 0,
            deadline_ms: 0,
            receipt: String::new(),
            priority: t.priority,
            seq,
            trace: t.trace.clone(),
            body: t.body.clone(),
        }
    }

    /// The packed form, with the optional fields left empty when they hold their default
    /// (as `lib.lua` leaves them), so a new record stays short.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::with_capacity(48 + self.receipt.len() + self.body.len());
        let nonzero = |v: u64| if v == 0 { String::new() } else { v.to_string() };
        let updated = if self.updated_at_ms == self.created_at_ms {
            String::new()
        } else {
            self.updated_at_ms.to_string()
        };
        // Writing to a String cannot fail.
        let priority = if self.priority == DEFAULT_PRIORITY {
            String::new()
        } else {
            self.priority.to_string()
        };
        let _ = writeln!(
            out,
            "{},{},{},{updated},{},{},{},{},{},{priority},{}",
            self.state.code(),
            self.due_ms,
            self.created_at_ms,
            self.ttr_ms,
            self.max_retries,
            nonzero(u64::from(self.retries)),
            nonzero(self.deadline_ms),
            self.receipt,
            seq_text(self.seq),
        );
        if let Some(trace) = &self.trace {
            // Replaces the newline just written: the trace is the header's last field.
            out.pop();
            out.push(',');
            out.push_str(&trace_text(trace));
            out.push('\n');
        }
        let mut out = out.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }

    /// Parses `header \n body`; `None` when it is not a record of ours.
    pub fn parse(raw: impl Into<Vec<u8>>) -> Option<Record> {
        let mut raw = raw.into();
        let nl = raw.iter().position(|&b| b == b'\n')?;
        let body = raw.split_off(nl + 1);
        let header = std::str::from_utf8(&raw[..nl]).ok()?;
        let mut fields = header.split(',');
        let mut next = || fields.next();
        let num = |v: Option<&str>| -> Option<u64> { v?.parse().ok() };
        let opt = |v: Option<&str>| -> Option<Option<u64>> {
            match v? {
                "" => Some(None),
                text => text.parse().ok().map(Some),
            }
        };
        let state = State::from_code(next()?.parse().ok()?)?;
        let due_ms = num(next())?;
        let created_at_ms = num(next())?;
        let updated_at_ms = opt(next())?.unwrap_or(created_at_ms);
        let ttr_ms = num(next())?;
        let max_retries = next()?.parse().ok()?;
        let retries = u32::try_from(opt(next())?.unwrap_or(0)).ok()?;
        let deadline_ms = opt(next())?.unwrap_or(0);
        let receipt = next()?.to_owned();
        // Absent in records of the previous version.
        let priority = match next() {
            None | Some("") => DEFAULT_PRIORITY,
            Some(text) => text.parse().ok()?,
        };
        let seq = match next() {
            None | Some("") => 0,
            Some(text) => u64::from_str_radix(text, 16).ok()?,
        };
        let trace = match next() {
            None | Some("") => None,
            Some(text) => Some(parse_trace_text(text)?),
        };
        if next().is_some() {
            return None;
        }
        Some(Record {
            state,
            due_ms,
            created_at_ms,
            updated_at_ms,
            ttr_ms,
            max_retries,
            retries,
            deadline_ms,
            receipt,
            priority,
            seq,
            trace,
            body,
        })
    }

    /// Whether this is a FINISHED or CANCELLED record whose retention has passed at `now`:
    /// it no longer exists, whatever the promoter has or has not removed yet.
    pub fn is_expired(&self, now: Millis) -> bool {
        self.state.is_terminal() && self.deadline_ms <= now
    }
}

/// An insertion number as records and members carry it: 16 hex digits; empty for 0 in a
/// record header.
fn seq_text(seq: u64) -> String {
    if seq == 0 {
        String::new()
    } else {
        format!("{seq:016x}")
    }
}

/// The trace context as the record's header field holds it (see the module doc).
pub(crate) fn trace_text(trace: &TraceContext) -> String {
    match trace.tracestate() {
        None => trace.traceparent().to_owned(),
        Some(state) => format!("{} {}", trace.traceparent(), state.replace(',', "\t")),
    }
}

/// The trace context of a record's header field; `None` when it is not one.
pub(crate) fn parse_trace_text(text: &str) -> Option<TraceContext> {
    let (parent, state) = match text.split_once(' ') {
        Some((parent, state)) => (parent, Some(state.replace('\t', ","))),
        None => (text, None),
    };
    TraceContext::parse(parent, state.as_deref()).ok()
}

/// The full view of a task from its record and extras.
pub(crate) fn task_info(
    topic: &str,
    id: &str,
    record: Record,
    extras: Option<&str>,
    op: &str,
) -> Result<TaskInfo, BackendError> {
    let bad = |what: &str| BackendError::protocol(op, format!("task {id:?}: bad {what}"));
    let (mut backoff, mut last_error, mut history) = (None, None, Vec::new());
    if let Some(extras) = extras {
        let mut parts = extras.splitn(3, '\0');
        let (b, e, h) = (parts.next(), parts.next(), parts.next());
        let (Some(b), Some(e), Some(h)) = (b, e, h) else {
            return Err(bad("extras"));
        };
        if !b.is_empty() {
            backoff = Some(serde_json::from_str::<Backoff>(b).map_err(|_| bad("backoff"))?);
        }
        if !e.is_empty() {
            last_error = Some(serde_json::from_str::<String>(e).map_err(|_| bad("last error"))?);
        }
        if !h.is_empty() {
            history = h
                .lines()
                .map(serde_json::from_str::<Attempt>)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| bad("history"))?;
        }
    }
    let deadline_ms = match record.state {
        State::Active | State::Finished | State::Cancelled => {
            Some(record.deadline_ms).filter(|&d| d != 0)
        }
        State::Delayed | State::Ready | State::Dead => None,
    };
    Ok(TaskInfo {
        id: id.to_owned(),
        topic: topic.to_owned(),
        body: record.body,
        priority: record.priority,
        state: record.state,
        due_ms: record.due_ms,
        delay_ms: record.due_ms.saturating_sub(record.created_at_ms),
        ttr_ms: record.ttr_ms,
        max_retries: record.max_retries,
        retries: record.retries,
        created_at_ms: record.created_at_ms,
        updated_at_ms: record.updated_at_ms,
        backoff,
        deadline_ms,
        last_error,
        history,
        trace: record.trace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// State, due, updated, retries, deadline, body.
    type Parsed<'a> = (State, Millis, Millis, u32, Millis, &'a str);

    #[test]
    fn records_parse() {
        let table: [(&str, Option<Parsed<'_>>); 6] = [
            (
                "0,2000,1000,,30000,3,,,\nhello",
                Some((State::Delayed, 2_000, 1_000, 0, 0, "hello")),
            ),
            (
                "2,2000,1000,1500,30000,-1,2,31500,abcd0001\nline 1\nline 2",
                Some((State::Active, 2_000, 1_500, 2, 31_500, "line 1\nline 2")),
            ),
            (
                "3,2000,1000,1500,30000,3,,61500,\n",
                Some((State::Finished, 2_000, 1_500, 0, 61_500, "")),
            ),
            ("9,2000,1000,,30000,3,,,\nx", None),
            ("0,2000,1000,,30000,3,,\nx", None),
            ("no newline", None),
        ];
        for (raw, want) in table {
            let got = Record::parse(raw.to_owned()).map(|r| {
                (
                    r.state,
                    r.due_ms,
                    r.updated_at_ms,
                    r.retries,
                    r.deadline_ms,
                    r.body,
                )
            });
            let want = want.map(|(s, d, u, r, x, b)| (s, d, u, r, x, b.as_bytes().to_vec()));
            assert_eq!(got, want, "{raw:?}");
        }
    }

    fn sample(state: State) -> Record {
        Record {
            state,
            due_ms: 2_000,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
            ttr_ms: 30_000,
            max_retries: 3,
            retries: 0,
            deadline_ms: 0,
            receipt: String::new(),
            priority: DEFAULT_PRIORITY,
            seq: 0,
            trace: None,
            body: b"hello".to_vec(),
        }
    }

    #[test]
    fn records_round_trip() {
        let mut table = Vec::new();
        for state in State::ALL {
            table.push(sample(state));
        }
        let mut active = sample(State::Active);
        active.updated_at_ms = 1_500;
        active.retries = u32::MAX;
        active.deadline_ms = 31_500;
        active.receipt = "00000000000a0001".to_owned();
        active.max_retries = -1;
        active.priority = 0;
        active.seq = 42;
        active.body = b"a,b\nc,\n\n\xff".to_vec();
        table.push(active.clone());
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        for state in [None, Some("congo=t61rcWkgMzE,rojo=a b")] {
            let mut traced = active.clone();
            traced.trace = Some(TraceContext::parse(parent, state).unwrap());
            table.push(traced.clone());
            traced.seq = 0;
            table.push(traced);
        }
        let mut huge = sample(State::Finished);
        huge.due_ms = u64::MAX;
        huge.created_at_ms = 0;
        huge.updated_at_ms = u64::MAX;
        huge.ttr_ms = u64::MAX;
        huge.max_retries = i64::from(u32::MAX);
        huge.deadline_ms = u64::MAX;
        huge.priority = u32::MAX;
        huge.seq = u64::MAX;
        huge.body = Vec::new();
        table.push(huge);
        for record in table {
            let packed = record.encode();
            assert_eq!(
                Record::parse(packed.clone()).as_ref(),
                Some(&record),
                "{packed:?}"
            );
        }
        // The defaults are left empty, as lib.lua leaves them.
        assert_eq!(
            sample(State::Delayed).encode(),
            b"0,2000,1000,,30000,3,,,,,\nhello"
        );
    }

    #[test]
    fn what_the_scripts_write_reencodes_the_same() {
        // Records as lib.lua's `save` writes them (updated set, even to the creation time).
        for raw in [
            "0,2000,1000,1500,30000,3,1,,\nhello",
            "2,2000,1000,1500,30000,-1,2,31500,abcd0001\nline 1\nline 2",
            "3,2000,1000,1500,30000,3,,61500,\n",
            "1,2000,1000,1000,30000,0,,,\nx",
            "1,2000,1000,1000,30000,0,,,,5,0000000000000017\nx",
            "5,2000,1000,1000,30000,0,,,,,18f0a0b0c0d00009\nx",
        ] {
            let record = Record::parse(raw.to_owned()).unwrap();
            assert_eq!(Record::parse(record.encode()), Some(record), "{raw:?}");
        }
    }

    #[test]
    fn new_records_read_back() {
        let spec = delayq::core::validate::validate_task(
            delayq::NewTask::new("t", "i").body("a\nb").delay_ms(5),
            &delayq::Limits::default(),
            &delayq::TaskDefaults::default(),
            1_000,
        )
        .unwrap();
        let packed = Record::new(&spec, 1_000, 0xab).encode();
        assert_eq!(packed, b"0,1005,1000,,30000,3,,,,,00000000000000ab\na\nb");
        let record = Record::parse(packed).unwrap();
        assert_eq!(record.state, State::Delayed);
        assert_eq!(
            (record.due_ms, record.created_at_ms, record.updated_at_ms),
            (1_005, 1_000, 1_000)
        );
        assert_eq!(
            (record.ttr_ms, record.max_retries, record.retries),
            (30_000, 3, 0)
        );
        assert_eq!(record.body, b"a\nb");
        assert_eq!(record.seq, 0xab);
        let ready = Record::parse(Record::new(&spec, 1_005, 1).encode()).unwrap();
        assert_eq!(ready.state, State::Ready);
    }

    #[test]
    fn a_failed_task_reads_back() {
        let record = Record::parse("0,2000,1000,1500,30000,3,1,,\nhello".to_owned()).unwrap();
        let extras = "{\"kind\":\"fixed\",\"ms\":500}\0\"boom\"\0\
            {\"started_at_ms\":1200,\"ended_at_ms\":1500,\"outcome\":\"released\",\"error\":\"boom\"}\n\
            {\"started_at_ms\":1600,\"ended_at_ms\":1700,\"outcome\":\"ttr_expired\"}";
        let info = task_info("t", "i", record, Some(extras), "testing").unwrap();
        assert_eq!(info.state, State::Delayed);
        assert_eq!(
            (info.due_ms, info.delay_ms, info.retries),
            (2_000, 1_000, 1)
        );
        assert_eq!(info.backoff, Some(Backoff::Fixed { ms: 500 }));
        assert_eq!(info.deadline_ms, None);
        assert_eq!(info.last_error.as_deref(), Some("boom"));
        assert_eq!(info.history.len(), 2);
        assert_eq!(info.history[0].error.as_deref(), Some("boom"));
        assert_eq!(info.history[1].outcome, "ttr_expired");
        assert_eq!(info.history[1].error, None);
        let plain = Record::parse("1,2000,1000,,30000,3,,,\n".to_owned()).unwrap();
        let info = task_info("t", "i", plain, None, "testing").unwrap();
        assert_eq!(
            (info.backoff, info.last_error, info.history.len()),
            (None, None, 0)
        );
    }

    #[test]
    fn priority_and_insertion_read_back_and_old_records_default() {
        // A record of the previous version (nine header fields).
        let old = Record::parse("1,2000,1000,,30000,3,,,\nx".to_owned()).unwrap();
        assert_eq!((old.priority, old.seq), (DEFAULT_PRIORITY, 0));
        let new =
            Record::parse("1,2000,1000,,30000,3,,,,0,0000000000000012\nx".to_owned()).unwrap();
        assert_eq!((new.priority, new.seq), (0, 0x12));
        let info = task_info("t", "i", new, None, "testing").unwrap();
        assert_eq!(info.priority, 0);
        // Too many fields, or a priority beyond u32: not ours.
        assert_eq!(
            Record::parse("1,2000,1000,,30000,3,,,,0,12,9\nx".to_owned()),
            None
        );
        assert_eq!(
            Record::parse("1,2000,1000,,30000,3,,,,4294967296,\nx".to_owned()),
            None
        );
    }

    #[test]
    fn retention_ends_exactly_at_the_deadline() {
        let done = Record::parse("3,1,1,,5,3,,5000,\n".to_owned()).unwrap();
        assert!(!done.is_expired(4_999));
        assert!(done.is_expired(5_000));
        let active = Record::parse("2,1,1,,5,3,,5000,r\n".to_owned()).unwrap();
        assert!(!active.is_expired(9_999));
    }
}
