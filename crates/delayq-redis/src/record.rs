//! The packed record format, both ways: [`Record::encode`] writes what `scripts/lib.lua`'s
//! `load` reads, [`Record::parse`] reads what its `save` writes, and [`task_info`] turns a
//! record and its extras into the view of `delayq_core`.
//!
//! A record is one string: a header, a newline, then the body (last and unescaped: it may hold
//! commas and newlines). The header is written short, because it is paid once per task and
//! a delayed task's memory is most of what a large Redis deployment holds:
//!
//! ```text
//! <state letter><created>,<due>,<insertion>,<updated>,<ttr>,<max retries>,<retries>,<deadline>,<receipt>,<priority>,<trace>,<expiry>,<key>
//! ```
//!
//! - the state is one letter, `a` (DELAYED) to `f` (DEAD): the state code plus `a`;
//! - numbers are base 36 (lower case); `due`, `updated` and `deadline` are signed offsets from
//!   `created` (`-` before a negative one);
//! - the insertion number `(ms << 20) + counter` is the counter, then `.` and the offset of
//!   its millisecond from `created` when that is not 0;
//! - an empty field holds its default: insertion 0 (none), updated = created, ttr 30 000 ms,
//!   max retries 3 (-1: no limit), retries 0, no deadline (ACTIVE: the ttr deadline;
//!   FINISHED/CANCELLED: the end of retention), no receipt (ACTIVE only), priority 1024,
//!   no trace context; trailing empty fields are left out, so an untraced record ends at
//!   its last field that is not a default;
//! - the trace context, only for a task added with one: the `traceparent`, then for a
//!   `tracestate` a space and the tracestate with its commas written as tabs (a checked
//!   tracestate holds neither tab nor comma otherwise, nor a newline, so the header stays
//!   one comma-separated line; `lib.lua` keeps the field as an opaque string);
//! - the expiry, only for a task added with one (docs/flow-control.md): its offset from
//!   `created`, then `!` when it is dropped at its expiry (`on_expire: drop`) rather than
//!   made DEAD. A record without an expiry (and without a trace context) is byte for byte
//!   what the release before expiries wrote;
//! - the flow-control key, only for a task added with one (the id's character set: no comma,
//!   space or newline). A record without one is what the release before keys wrote.
//!
//! So a task due in an hour is `amwzf57y5,255s0,8c` and a newline before its body: 19 bytes
//! (a few more when the insertion number's millisecond is not the creation's), where the
//! decimal form took about 60. A 100-byte body's record then fits Redis's 128-byte allocation
//! instead of the 192-byte one.
//!
//! **Older records** begin with the state's digit: comma-separated decimal fields — state,
//! due, created, updated (empty: created), ttr, max retries, retries (empty: 0), deadline
//! (empty: none), receipt, priority (empty: 1024), insertion number (16 hex digits; empty:
//! 0) — and those of the version before priorities end after the receipt. Both read here and
//! in `lib.lua`; any script that changes such a record writes it back in the short form.
//!
//! Extras (only failing tasks or tasks with a backoff have them) are three parts separated by
//! NUL bytes: the backoff as JSON (empty: none), the last error as a JSON string (empty:
//! none), the history (one JSON object per line, oldest first). The scripts write them; the
//! add script writes the backoff the caller encoded with serde.

use delayq::core::{DEFAULT_PRIORITY, Priority};
use delayq::{Attempt, Backoff, Millis, OnExpire, State, TaskInfo, TaskSpec, TraceContext};

use crate::error::BackendError;

/// The ttr an empty field holds (the library's default; fixed here, so a record's meaning
/// never follows configuration).
const DEFAULT_TTR_MS: u64 = 30_000;
/// The max retries an empty field holds (the library's default, fixed likewise).
const DEFAULT_MAX_RETRIES: i64 = 3;
/// The first state letter: state code 0 is `a`.
const STATE_LETTER: u8 = b'a';

/// A field of the short header as [`Record::encode`] writes it.
enum Field<'a> {
    /// A number in base 36; `None`: empty (the default).
    Number(Option<i128>),
    /// The insertion number (see [`push_seq`]).
    Seq,
    Text(&'a str),
    /// The trace context (see [`push_trace`]); `None`: empty.
    Trace(Option<&'a TraceContext>),
    /// The expiry (see [`push_expiry`]); `None`: empty.
    Expiry(Option<(Millis, OnExpire)>),
}

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
    /// The insertion number, given by the adding instance (0: a record of the version before
    /// insertion numbers).
    pub seq: u64,
    /// The producer's trace context, if the task was added with one.
    pub trace: Option<TraceContext>,
    /// When the task expires unless handed out before, and what the expiry does.
    pub expiry: Option<(Millis, OnExpire)>,
    /// The flow-control key (docs/flow-control.md), if the task was added with one.
    pub key: Option<String>,
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
            expiry: t.expires_at_ms.map(|at| (at, t.on_expire)),
            key: t.key.clone(),
            body: t.body.clone(),
        }
    }

    /// The packed form (the short header of the module doc), defaults left empty as
    /// `lib.lua` leaves them.
    pub fn encode(&self) -> Vec<u8> {
        let created = self.created_at_ms;
        let at = |t: Millis| i128::from(t) - i128::from(created);
        let unless = |default: bool, n: i128| Field::Number((!default).then_some(n));
        let fields = [
            Field::Number(Some(at(self.due_ms))),
            Field::Seq,
            unless(self.updated_at_ms == created, at(self.updated_at_ms)),
            unless(self.ttr_ms == DEFAULT_TTR_MS, i128::from(self.ttr_ms)),
            unless(
                self.max_retries == DEFAULT_MAX_RETRIES,
                i128::from(self.max_retries),
            ),
            unless(self.retries == 0, i128::from(self.retries)),
            unless(self.deadline_ms == 0, at(self.deadline_ms)),
            Field::Text(&self.receipt),
            unless(self.priority == DEFAULT_PRIORITY, i128::from(self.priority)),
            Field::Trace(self.trace.as_ref()),
            Field::Expiry(self.expiry),
            Field::Text(self.key.as_deref().unwrap_or("")),
        ];
        let mut out = String::with_capacity(32 + self.receipt.len() + self.body.len());
        out.push(char::from(STATE_LETTER + self.state.code()));
        push36(&mut out, i128::from(created));
        // Where the last field that is not empty ends: the empty ones after it are cut.
        let mut keep = out.len();
        for field in fields {
            out.push(',');
            let start = out.len();
            match field {
                Field::Number(Some(n)) => push36(&mut out, n),
                Field::Seq => push_seq(&mut out, self.seq, created),
                Field::Text(text) => out.push_str(text),
                Field::Trace(Some(trace)) => push_trace(&mut out, trace),
                Field::Expiry(Some((at, on_expire))) => {
                    push_expiry(&mut out, at, on_expire, created);
                }
                Field::Number(None) | Field::Trace(None) | Field::Expiry(None) => {}
            }
            if out.len() > start {
                keep = out.len();
            }
        }
        out.truncate(keep);
        out.push('\n');
        let mut out = out.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }

    /// Parses `header \n body`, in the short form or the older decimal one; `None` when it
    /// is not a record of ours.
    pub fn parse(raw: impl Into<Vec<u8>>) -> Option<Record> {
        let mut raw = raw.into();
        let nl = raw.iter().position(|&b| b == b'\n')?;
        let body = raw.split_off(nl + 1);
        let header = std::str::from_utf8(&raw[..nl]).ok()?;
        let mut record = if header.as_bytes().first()?.is_ascii_digit() {
            parse_decimal(header)?
        } else {
            parse_short(header)?
        };
        record.body = body;
        Some(record)
    }

    /// Whether this is a FINISHED or CANCELLED record whose retention has passed at `now`:
    /// it no longer exists, whatever the promoter has or has not removed yet.
    pub fn is_expired(&self, now: Millis) -> bool {
        self.state.is_terminal() && self.deadline_ms <= now
    }
}

/// A record of `state` created at `created` holding every default of the short form, due
/// at its creation, with an empty body: the parsers fill in what a header says.
pub(crate) fn blank(state: State, created: Millis) -> Record {
    Record {
        state,
        due_ms: created,
        created_at_ms: created,
        updated_at_ms: created,
        ttr_ms: DEFAULT_TTR_MS,
        max_retries: DEFAULT_MAX_RETRIES,
        retries: 0,
        deadline_ms: 0,
        receipt: String::new(),
        priority: DEFAULT_PRIORITY,
        seq: 0,
        trace: None,
        expiry: None,
        key: None,
        body: Vec::new(),
    }
}

/// Appends the expiry field: the offset from `created`, then `!` for `on_expire: drop`.
fn push_expiry(out: &mut String, at: Millis, on_expire: OnExpire, created: Millis) {
    push36(out, i128::from(at) - i128::from(created));
    match on_expire {
        OnExpire::Dead => {}
        OnExpire::Drop => out.push('!'),
    }
}

/// Appends the trace context as the record's header field holds it (see the module doc).
fn push_trace(out: &mut String, trace: &TraceContext) {
    out.push_str(trace.traceparent());
    if let Some(state) = trace.tracestate() {
        out.push(' ');
        out.extend(state.chars().map(|c| if c == ',' { '\t' } else { c }));
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

/// The short header: `<state letter><created>,` then the offsets and fields of the module
/// doc; the body is left empty.
fn parse_short(header: &str) -> Option<Record> {
    let code = header.as_bytes()[0].checked_sub(STATE_LETTER)?;
    let state = State::from_code(code)?;
    let mut fields = header[1..].split(',');
    let created = unsigned36(fields.next()?)?;
    let mut field = || fields.next().unwrap_or("");
    let at = |text: &str| -> Option<Millis> {
        u64::try_from(i128::from(created) + parse_signed36(text)?).ok()
    };
    let mut r = blank(state, created);
    r.due_ms = at(field())?;
    r.seq = parse_seq_field(field(), created)?;
    let (updated, ttr, max, retries, deadline) = (field(), field(), field(), field(), field());
    if !updated.is_empty() {
        r.updated_at_ms = at(updated)?;
    }
    if !ttr.is_empty() {
        r.ttr_ms = unsigned36(ttr)?;
    }
    if !max.is_empty() {
        r.max_retries = i64::try_from(parse_signed36(max)?).ok()?;
    }
    if !retries.is_empty() {
        r.retries = u32::try_from(unsigned36(retries)?).ok()?;
    }
    if !deadline.is_empty() {
        r.deadline_ms = at(deadline)?;
    }
    r.receipt = field().to_owned();
    let priority = field();
    if !priority.is_empty() {
        r.priority = Priority::try_from(unsigned36(priority)?).ok()?;
    }
    let trace = field();
    if !trace.is_empty() {
        r.trace = Some(parse_trace_text(trace)?);
    }
    let expiry = field();
    if !expiry.is_empty() {
        let (offset, on_expire) = match expiry.strip_suffix('!') {
            Some(offset) => (offset, OnExpire::Drop),
            None => (expiry, OnExpire::Dead),
        };
        r.expiry = Some((at(offset)?, on_expire));
    }
    let key = field();
    if !key.is_empty() {
        r.key = Some(key.to_owned());
    }
    if fields.next().is_some() {
        return None;
    }
    Some(r)
}

/// The decimal header of the versions before the short one (see the module doc); the body
/// is left empty.
fn parse_decimal(header: &str) -> Option<Record> {
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
    let created = num(next())?;
    let mut r = blank(state, created);
    r.due_ms = due_ms;
    r.updated_at_ms = opt(next())?.unwrap_or(created);
    r.ttr_ms = num(next())?;
    r.max_retries = next()?.parse().ok()?;
    r.retries = u32::try_from(opt(next())?.unwrap_or(0)).ok()?;
    r.deadline_ms = opt(next())?.unwrap_or(0);
    r.receipt = next()?.to_owned();
    // Absent in records of the version before priorities.
    r.priority = match next() {
        None | Some("") => DEFAULT_PRIORITY,
        Some(text) => text.parse().ok()?,
    };
    r.seq = match next() {
        None | Some("") => 0,
        Some(text) => u64::from_str_radix(text, 16).ok()?,
    };
    if next().is_some() {
        return None;
    }
    Some(r)
}

/// Appends `n` in base 36 (lower case), `-` before a negative number, without allocating.
fn push36(out: &mut String, n: i128) {
    if n < 0 {
        out.push('-');
    }
    let mut n = n.unsigned_abs();
    // 2^128 has 25 base-36 digits.
    let mut digits = [0u8; 25];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdefghijklmnopqrstuvwxyz"[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
}

/// A base-36 number without a sign; `None` for anything else (an empty field too).
fn unsigned36(text: &str) -> Option<u64> {
    // from_str_radix accepts a leading `+`, which no record holds.
    if text.starts_with('+') {
        return None;
    }
    u64::from_str_radix(text, 36).ok()
}

fn parse_signed36(text: &str) -> Option<i128> {
    match text.strip_prefix('-') {
        Some(rest) => Some(-i128::from(unsigned36(rest)?)),
        None => Some(i128::from(unsigned36(text)?)),
    }
}

/// Bits of the counter in an insertion number (`(ms << 20) + counter`).
const SEQ_COUNTER_BITS: u32 = 20;

/// Appends the insertion number of a short header: nothing for 0, else the counter and,
/// when its millisecond is not `created`, `.` and the offset.
fn push_seq(out: &mut String, seq: u64, created: Millis) {
    if seq == 0 {
        return;
    }
    let (ms, counter) = (seq >> SEQ_COUNTER_BITS, seq & ((1 << SEQ_COUNTER_BITS) - 1));
    push36(out, i128::from(counter));
    if ms != created {
        out.push('.');
        push36(out, i128::from(ms) - i128::from(created));
    }
}

fn parse_seq_field(text: &str, created: Millis) -> Option<u64> {
    if text.is_empty() {
        return Some(0);
    }
    let (counter, offset) = match text.split_once('.') {
        Some((counter, offset)) => (counter, parse_signed36(offset)?),
        None => (text, 0),
    };
    let counter = unsigned36(counter).filter(|&c| c < 1 << SEQ_COUNTER_BITS)?;
    let ms = u64::try_from(i128::from(created) + offset).ok()?;
    if ms >> (64 - SEQ_COUNTER_BITS) != 0 {
        return None;
    }
    Some((ms << SEQ_COUNTER_BITS) | counter)
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
        expires_at_ms: record.expiry.map(|(at, _)| at),
        on_expire: record.expiry.map(|(_, e)| e).unwrap_or_default(),
        key: record.key,
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
        let mut r = blank(state, 1_000);
        r.due_ms = 2_000;
        r.body = b"hello".to_vec();
        r
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
        for on_expire in [OnExpire::Dead, OnExpire::Drop] {
            let mut expiring = sample(State::Ready);
            expiring.expiry = Some((3_000, on_expire));
            table.push(expiring.clone());
            let mut both = active.clone();
            both.trace = Some(TraceContext::parse(parent, Some("a=1,b=2")).unwrap());
            both.expiry = Some((9_000, on_expire));
            table.push(both);
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
        // The defaults are left empty, as lib.lua leaves them, and so are trailing fields.
        assert_eq!(sample(State::Delayed).encode(), b"ars,rs\nhello");
    }

    #[test]
    fn a_delayed_task_has_a_short_header() {
        // What an application's add makes: created in 2026, due in an hour, the 300th task
        // of its millisecond; 18 bytes before the body where the decimal form took 60.
        let created = 1_795_810_398_845;
        let mut record = sample(State::Delayed);
        record.created_at_ms = created;
        record.updated_at_ms = created;
        record.due_ms = created + 3_600_000;
        record.seq = (created << 20) | 300;
        let packed = record.encode();
        assert_eq!(packed, b"amwzf57y5,255s0,8c\nhello");
        assert_eq!(Record::parse(packed), Some(record.clone()));
        // The insertion number of another millisecond than the creation's carries the offset.
        record.seq = ((created + 3) << 20) | 7;
        assert_eq!(record.encode(), b"amwzf57y5,255s0,7.3\nhello");
        assert_eq!(Record::parse(record.encode()), Some(record.clone()));
        record.seq = ((created - 40) << 20) | 7;
        assert_eq!(record.encode(), b"amwzf57y5,255s0,7.-14\nhello");
        assert_eq!(Record::parse(record.encode()), Some(record.clone()));
        // A trace context is the last field, after the empty ones: 63 bytes for a bare
        // traceparent; a tracestate's commas are written as tabs.
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        record.seq = (created << 20) | 300;
        let untraced = record.encode().len();
        record.trace = Some(TraceContext::parse(parent, None).unwrap());
        let packed = record.encode();
        assert_eq!(packed.len() - untraced, 63);
        assert_eq!(Record::parse(packed), Some(record.clone()));
        record.trace = Some(TraceContext::parse(parent, Some("a=1,b=x y")).unwrap());
        let packed = format!("amwzf57y5,255s0,8c,,,,,,,,{parent} a=1\tb=x y\nhello");
        assert_eq!(record.encode(), packed.as_bytes());
        assert_eq!(Record::parse(record.encode()), Some(record.clone()));
        // An expiry is the field after the trace context: its offset from created, and `!`
        // when the task is dropped at its expiry.
        record.trace = None;
        record.expiry = Some((created + 7_200_000, OnExpire::Drop));
        assert_eq!(record.encode(), b"amwzf57y5,255s0,8c,,,,,,,,,4abk0!\nhello");
        assert_eq!(Record::parse(record.encode()), Some(record.clone()));
        record.expiry = Some((created + 7_200_000, OnExpire::Dead));
        assert_eq!(record.encode(), b"amwzf57y5,255s0,8c,,,,,,,,,4abk0\nhello");
        assert_eq!(Record::parse(record.encode()), Some(record));
    }

    #[test]
    fn short_headers_that_are_not_ours_are_refused() {
        for raw in [
            "grs,rs\nx",                // no such state
            "Ars,rs\nx",                // upper case is not a state letter
            "a,rs\nx",                  // no creation time
            "ars\nx",                   // no due
            "ars,+rs\nx",               // a sign base 36 does not write
            "ars,rs,,,,,,,,,9,1\nx",    // a field too many
            "ars,rs,,,,,,,,,9!!\nx",    // an expiry that is not one
            "ars,rs,,,,,,,,1z141z4\nx", // a priority beyond u32
            "ars,rs,mh34\nx",           // a counter beyond 20 bits
            "ars,-rt\nx",               // due before the epoch
            "ars,rs,1.68hqlcqv4\nx",    // an insertion millisecond beyond 44 bits
            "a3w5e11264sgsg,rs\nx",     // created beyond u64
        ] {
            assert_eq!(Record::parse(raw.to_owned()), None, "{raw:?}");
        }
    }

    #[test]
    fn the_short_form_the_scripts_write_reads_as_the_decimal_original() {
        // The decimal records of the previous release, and what lib.lua's `save` made of them
        // (taken from a redis-server: `load` of the first, then `save`).
        let table = [
            (
                "0,1764273600000,1764270000000,,30000,3,,,,,01aaf2b6a4c00007\nhello",
                "amihst0g0,255s0,7.-l1ue5np0\nhello",
            ),
            (
                "2,1764273600000,1764270000000,1764270001234,60000,-1,2,1764270061234,abcd,5,01aaf2b6a4d00007\nx,y\nz",
                "cmihst0g0,255s0,7.-l1ue5noz,ya,1aao,-1,2,1b8y,abcd,5\nx,y\nz",
            ),
            ("1,2000,1000,,30000,3,,,\nold", "brs,rs\nold"),
            ("3,2000,1000,1500,30000,3,,61500,\n", "drs,rs,,dw,,,,1aok\n"),
        ];
        for (decimal, short) in table {
            let record = Record::parse(decimal.to_owned()).unwrap();
            assert_eq!(
                Record::parse(short.to_owned()).as_ref(),
                Some(&record),
                "{short:?}"
            );
            assert_eq!(record.encode(), short.as_bytes(), "{decimal:?}");
        }
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
        let packed = Record::new(&spec, 1_000, (1_000 << 20) | 0xab).encode();
        assert_eq!(packed, b"ars,5,4r\na\nb");
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
        assert_eq!(record.seq, (1_000 << 20) | 0xab);
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
