//! W3C trace context (<https://www.w3.org/TR/trace-context/>) carried by a task, so a trace
//! that adds a task continues where the task is consumed (docs/tracing.md).
//!
//! A [`TraceContext`] exists only in its checked, normalised form: a version-00 `traceparent`
//! of exactly [`TRACEPARENT_LEN`] lower-case characters, and an optional `tracestate` of at
//! most [`MAX_TRACESTATE_BYTES`] bytes and [`MAX_TRACESTATE_MEMBERS`] list members, rejoined
//! with bare commas. Input that does not parse is refused with an [`InvalidField`] naming the
//! field (delayq answers 400 rather than silently starting a new trace, so a broken producer
//! is seen at once); a `traceparent` of a later version is read as the specification says (its
//! first four fields) and stored as version 00, the version this build speaks.

use serde::{Deserialize, Serialize};

use crate::validate::InvalidField;

/// The length of a version-00 `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`.
pub const TRACEPARENT_LEN: usize = 55;

/// The longest `tracestate` kept: the specification's 512 characters that every vendor must
/// propagate.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// The most list members of a `tracestate` (the specification's limit).
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The field name of the trace parent, in the API and as an HTTP header.
pub const TRACEPARENT: &str = "traceparent";

/// The field name of the vendor trace state, in the API and as an HTTP header.
pub const TRACESTATE: &str = "tracestate";

/// A checked W3C trace context: the producer's span a task continues.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawTraceContext", into = "RawTraceContext")]
pub struct TraceContext {
    traceparent: Box<str>,
    tracestate: Option<Box<str>>,
}

/// The serde form: both fields as text, checked on the way in.
#[derive(Serialize, Deserialize)]
struct RawTraceContext {
    traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tracestate: Option<String>,
}

impl TryFrom<RawTraceContext> for TraceContext {
    type Error = InvalidField;

    fn try_from(raw: RawTraceContext) -> Result<Self, InvalidField> {
        TraceContext::parse(&raw.traceparent, raw.tracestate.as_deref())
    }
}

impl From<TraceContext> for RawTraceContext {
    fn from(t: TraceContext) -> Self {
        RawTraceContext {
            traceparent: t.traceparent.into(),
            tracestate: t.tracestate.map(Into::into),
        }
    }
}

impl TraceContext {
    /// Checks a `traceparent` and an optional `tracestate` (an empty one counts as none).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, InvalidField> {
        let traceparent = parse_traceparent(traceparent)?;
        let tracestate = match tracestate.map(str::trim) {
            None | Some("") => None,
            Some(state) => Some(parse_tracestate(state)?.into_boxed_str()),
        };
        Ok(TraceContext {
            traceparent: traceparent.into_boxed_str(),
            tracestate,
        })
    }

    /// A context from its parts: a new trace id or a new span id in an existing trace. `None`
    /// when either id is zero, which the specification forbids.
    pub fn from_ids(trace_id: u128, span_id: u64, sampled: bool) -> Option<Self> {
        if trace_id == 0 || span_id == 0 {
            return None;
        }
        let flags = u8::from(sampled);
        Some(TraceContext {
            traceparent: format!("00-{trace_id:032x}-{span_id:016x}-{flags:02x}").into_boxed_str(),
            tracestate: None,
        })
    }

    /// The same flags and tracestate with other ids; `None` when either id is zero.
    pub fn with_ids(&self, trace_id: u128, span_id: u64) -> Option<Self> {
        let mut next = TraceContext::from_ids(trace_id, span_id, self.sampled())?;
        next.traceparent = format!("{}{:02x}", &next.traceparent[..53], self.flags()).into();
        next.tracestate = self.tracestate.clone();
        Some(next)
    }

    /// The same trace, flags and state with `span_id` as the parent: what a span of delayq
    /// that continues this context hands on.
    pub fn child(&self, span_id: u64) -> Option<Self> {
        self.with_ids(self.trace_id(), span_id)
    }

    /// The `traceparent` header value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` header value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id.
    pub fn trace_id(&self) -> u128 {
        // Checked at construction: 32 lower-case hex digits.
        u128::from_str_radix(&self.traceparent[3..35], 16).unwrap_or(0)
    }

    /// The parent span id.
    pub fn span_id(&self) -> u64 {
        u64::from_str_radix(&self.traceparent[36..52], 16).unwrap_or(0)
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0)
    }

    /// Whether the producer sampled its trace.
    pub fn sampled(&self) -> bool {
        self.flags() & 1 == 1
    }

    /// The bytes the context adds to a task's record, for the memory figures.
    pub fn stored_bytes(&self) -> usize {
        self.traceparent.len() + self.tracestate.as_ref().map_or(0, |s| s.len())
    }
}

fn is_lower_hex(s: &[u8]) -> bool {
    s.iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

/// Whether an id's digits are all `0`, which the specification forbids.
fn is_zero(id: &[u8]) -> bool {
    id.iter().all(|&b| b == b'0')
}

/// A version-00 `traceparent` from the header of any version (specification §3.2.4: a later
/// version is read by its first four fields, and must then be 55 characters or go on with `-`).
///
/// What producers send, a version-00 header of 55 lower-case characters with no space around
/// it, is checked in one pass over its bytes and kept as it came; anything else goes through
/// [`read_traceparent`], which also says what is wrong. Every traced request and task pays
/// this, and the general reader (split, checks, `format!`) cost more than half as many
/// instructions as a task's whole JSON body.
fn parse_traceparent(value: &str) -> Result<String, InvalidField> {
    match well_formed_v00(value) {
        true => Ok(value.to_owned()),
        false => read_traceparent(value),
    }
}

/// Whether `value` is a version-00 `traceparent` exactly as it is stored: `00-`, 32 and 16
/// lower-case hex digits (neither id all zeros) and 2 of flags, separated by `-`.
fn well_formed_v00(value: &str) -> bool {
    let b = value.as_bytes();
    // `00-` trace id (3..35) `-` span id (36..52) `-` flags (53..55).
    b.len() == TRACEPARENT_LEN
        && b.starts_with(b"00-")
        && b[35] == b'-'
        && b[52] == b'-'
        && is_lower_hex(&b[3..35])
        && is_lower_hex(&b[36..52])
        && is_lower_hex(&b[53..55])
        && !is_zero(&b[3..35])
        && !is_zero(&b[36..52])
}

/// [`parse_traceparent`] for any header: the reader that names what is wrong.
fn read_traceparent(value: &str) -> Result<String, InvalidField> {
    let bad = |why: &str| {
        InvalidField::new(
            TRACEPARENT,
            format!(
                "{why}; expected 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>, lower case"
            ),
        )
    };
    let value = value.trim();
    check_size(TRACEPARENT, value)?;
    let version = value.get(..2).ok_or_else(|| bad("is too short"))?;
    if !is_lower_hex(version.as_bytes()) || version == "ff" {
        return Err(bad("has an invalid version"));
    }
    let head = match value.len() {
        TRACEPARENT_LEN => value,
        n if n > TRACEPARENT_LEN
            && version != "00"
            && value.as_bytes()[TRACEPARENT_LEN] == b'-' =>
        {
            &value[..TRACEPARENT_LEN]
        }
        n => return Err(bad(&format!("is {n} characters, not {TRACEPARENT_LEN}"))),
    };
    let parts: Vec<&str> = head.split('-').collect();
    let [_, trace_id, span_id, flags] = parts.as_slice() else {
        return Err(bad("does not have four fields"));
    };
    if trace_id.len() != 32 || span_id.len() != 16 || flags.len() != 2 {
        return Err(bad("has a field of the wrong length"));
    }
    let hex = |field: &str| is_lower_hex(field.as_bytes());
    if !hex(trace_id) || !hex(span_id) || !hex(flags) {
        return Err(bad("holds a character that is not lower-case hex"));
    }
    if is_zero(trace_id.as_bytes()) {
        return Err(bad("has an all-zero trace id"));
    }
    if is_zero(span_id.as_bytes()) {
        return Err(bad("has an all-zero span id"));
    }
    Ok(format!("00-{trace_id}-{span_id}-{flags}"))
}

/// Refuses a header value over [`MAX_TRACESTATE_BYTES`] before reading it (a `traceparent`
/// of a later version may be longer than 55 characters, but not without bound).
fn check_size(field: &str, value: &str) -> Result<(), InvalidField> {
    if value.len() > MAX_TRACESTATE_BYTES {
        return Err(InvalidField::too_large(
            field,
            format!(
                "is {} bytes, the limit is {MAX_TRACESTATE_BYTES} bytes",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// A `tracestate` within the limits, its members trimmed and rejoined with bare commas (so the
/// stored form holds no tab and no space around a comma).
fn parse_tracestate(value: &str) -> Result<String, InvalidField> {
    check_size(TRACESTATE, value)?;
    let members: Vec<&str> = value
        .split(',')
        .map(|m| m.trim_matches([' ', '\t']))
        .filter(|m| !m.is_empty())
        .collect();
    if members.len() > MAX_TRACESTATE_MEMBERS {
        return Err(InvalidField::too_large(
            TRACESTATE,
            format!(
                "has {} list members, the limit is {MAX_TRACESTATE_MEMBERS}",
                members.len()
            ),
        ));
    }
    for member in &members {
        let Some((key, val)) = member.split_once('=') else {
            return Err(InvalidField::new(
                TRACESTATE,
                format!("member {member:?} is not key=value"),
            ));
        };
        let key_ok = !key.is_empty()
            && key.len() <= 256
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-*/@".contains(&b));
        let val_ok = !val.is_empty()
            && val.len() <= 256
            && val
                .bytes()
                .all(|b| (0x20..=0x7e).contains(&b) && b != b',' && b != b'=');
        if !key_ok || !val_ok {
            return Err(InvalidField::new(
                TRACESTATE,
                format!(
                    "member {member:?} is not a W3C list member (key: lower-case letters, digits, _-*/@; value: printable ASCII without , or =)"
                ),
            ));
        }
    }
    Ok(members.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparents() {
        // (input, Ok(stored) or Err(what the reason mentions))
        let table: [(&str, Result<&str, &str>); 13] = [
            (GOOD, Ok(GOOD)),
            (&format!(" {GOOD} "), Ok(GOOD)),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
                Ok("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
            ),
            // A later version: its first four fields, stored as version 00.
            (
                "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-be",
                Ok(GOOD),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
                Err("characters"),
            ),
            (
                "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Err("version"),
            ),
            (
                "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
                Err("lower-case hex"),
            ),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                Err("all-zero trace id"),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                Err("all-zero span id"),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736a-0f067aa0ba902b7-01",
                Err("wrong length"),
            ),
            (
                "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
                Err("four fields"),
            ),
            ("", Err("too short")),
            ("é", Err("version")),
        ];
        for (input, expected) in table {
            let got = TraceContext::parse(input, None);
            match expected {
                Ok(stored) => assert_eq!(got.expect(input).traceparent(), stored),
                Err(why) => {
                    let e = got.expect_err(input);
                    assert_eq!(e.field, TRACEPARENT);
                    assert!(e.reason.contains(why), "{input}: {}", e.reason);
                }
            }
        }
        let long = "0".repeat(600);
        assert!(TraceContext::parse(&long, None).unwrap_err().too_large);
    }

    #[test]
    fn tracestates() {
        let ok = |s: &str| TraceContext::parse(GOOD, Some(s));
        assert_eq!(
            ok("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7\t")
                .unwrap()
                .tracestate(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        assert_eq!(ok("").unwrap().tracestate(), None);
        assert_eq!(ok("a@b=1,c=x y").unwrap().tracestate(), Some("a@b=1,c=x y"));
        for bad in ["novalue", "UPPER=1", "k=", "k=a=b", "k=\u{7f}"] {
            let e = ok(bad).expect_err(bad);
            assert_eq!(e.field, TRACESTATE);
        }
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        assert!(ok(&many).unwrap_err().reason.contains("32"));
        let long = format!("k={}", "v".repeat(600));
        assert!(ok(&long).unwrap_err().too_large);
    }

    #[test]
    fn ids_and_children() {
        let t = TraceContext::parse(GOOD, Some("a=1")).unwrap();
        assert_eq!(t.trace_id(), 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(t.span_id(), 0x00f067aa0ba902b7);
        assert!(t.sampled());
        let c = t.child(0xabc).unwrap();
        assert_eq!(
            c.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000abc-01"
        );
        let other = TraceContext::parse(&GOOD.replace("-01", "-03"), None).unwrap();
        assert_eq!(
            other.with_ids(5, 6).unwrap().traceparent(),
            "00-00000000000000000000000000000005-0000000000000006-03"
        );
        assert_eq!(t.with_ids(5, 0), None);
        assert_eq!(c.tracestate(), Some("a=1"));
        assert_eq!(TraceContext::from_ids(0, 1, true), None);
        assert_eq!(t.stored_bytes(), 55 + 3);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<TraceContext>(&json).unwrap(), t);
        assert!(serde_json::from_str::<TraceContext>(r#"{"traceparent":"00-bad"}"#).is_err());
    }

    proptest::proptest! {
        /// The one-pass check stores what the general reader stores, and refuses nothing it
        /// would take: headers made from a good one by changing, moving, adding or removing
        /// characters (hex of both cases, dashes, zeros, spaces, other versions).
        #[test]
        fn the_quick_check_agrees_with_the_reader(
            edits in proptest::collection::vec(
                (0usize..60, proptest::sample::select(vec![
                    '0', '1', 'a', 'f', 'g', 'A', 'F', '-', ' ', 'x',
                ]), 0u8..3),
                0..4,
            ),
            zero_trace in proptest::bool::ANY,
            zero_span in proptest::bool::ANY,
        ) {
            let mut v: Vec<char> = GOOD.chars().collect();
            if zero_trace {
                v[3..35].fill('0');
            }
            if zero_span {
                v[36..52].fill('0');
            }
            for (at, c, how) in edits {
                let at = at.min(v.len());
                match how {
                    0 if at < v.len() => v[at] = c,
                    1 => v.insert(at, c),
                    _ if at < v.len() => {
                        v.remove(at);
                    }
                    _ => {}
                }
            }
            let header: String = v.into_iter().collect();
            if well_formed_v00(&header) {
                proptest::prop_assert_eq!(read_traceparent(&header), Ok(header.clone()));
            }
            proptest::prop_assert_eq!(parse_traceparent(&header), read_traceparent(&header));
        }
    }
}
