//! Durations and instants as people write and read them.
//!
//! [`parse_duration`] reads `500ms`, `15m`, `2h`, `1d` and sums like `1h30m`; a bare number
//! is refused, because `--delay 15` would be ambiguous. [`format_duration`] writes the two
//! largest units (`1h 30m`, `2.5s`), and [`format_relative`] a due time as `in 15m` or
//! `3s ago`. Instants are RFC 3339 (`2030-01-01T08:00:00+02:00`), written in UTC.

use std::fmt::Write as _;

/// Milliseconds per unit, longest suffix first so that `ms` is not read as `m` + `s`.
const UNITS: [(&str, u64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// Parses a duration such as `500ms`, `15m`, `2h`, `1d` or `1h30m` into milliseconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration; write e.g. 500ms, 15m, 2h or 1d".into());
    }
    let mut rest = text;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "invalid duration {text:?}: expected a number at {rest:?}"
            ));
        }
        let (number, tail) = rest.split_at(digits);
        let value: u64 = number
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: {number} is too large"))?;
        let Some((unit, factor)) = UNITS.iter().find(|(unit, _)| {
            tail.starts_with(unit)
                && !tail[unit.len()..].starts_with(|c: char| c.is_ascii_alphabetic())
        }) else {
            return Err(format!(
                "invalid duration {text:?}: a unit (ms, s, m, h or d) must follow {number}"
            ));
        };
        let part = value
            .checked_mul(*factor)
            .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
        total = total
            .checked_add(part)
            .ok_or_else(|| format!("invalid duration {text:?}: too large"))?;
        rest = &tail[unit.len()..];
    }
    Ok(total)
}

/// Writes a duration in milliseconds with its two largest units: `250ms`, `2.5s`, `15m`,
/// `1h 30m`, `3d 4h`.
pub fn format_duration(ms: u64) -> String {
    if ms < 1_000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        return if ms.is_multiple_of(1_000) {
            format!("{}s", ms / 1_000)
        } else {
            format!("{}.{}s", ms / 1_000, (ms % 1_000) / 100)
        };
    }
    let mut out = String::new();
    let mut rest = ms;
    let mut written = 0;
    for (unit, factor) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        let count = rest / factor;
        rest %= factor;
        if count > 0 {
            if written > 0 {
                out.push(' ');
            }
            let _ = write!(out, "{count}{unit}");
            written += 1;
        } else if written > 0 {
            // Stop at a gap: `1h 0m 5s` reads better as `1h`.
            break;
        }
        if written == 2 {
            break;
        }
    }
    out
}

/// Writes `at_ms` relative to `now_ms`: `in 15m`, `3s ago`, `now`.
pub fn format_relative(at_ms: u64, now_ms: u64) -> String {
    if at_ms == now_ms {
        return "now".into();
    }
    if at_ms >= now_ms {
        format!("in {}", format_duration(at_ms - now_ms))
    } else {
        format!("{} ago", format_duration(now_ms - at_ms))
    }
}

/// Parses an RFC 3339 instant (`2030-01-01T08:00:00Z`, `...+02:00`) into epoch milliseconds.
pub fn parse_instant(text: &str) -> Result<u64, String> {
    let ts: jiff::Timestamp = text.trim().parse().map_err(|err| {
        format!("invalid time {text:?}: {err}; write RFC 3339, e.g. 2030-01-01T08:00:00Z")
    })?;
    u64::try_from(ts.as_millisecond()).map_err(|_| format!("invalid time {text:?}: before 1970"))
}

/// Writes epoch milliseconds as an RFC 3339 instant in UTC with milliseconds.
pub fn format_instant(ms: u64) -> String {
    match i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
    {
        Some(ts) => format!("{ts:.3}"),
        None => format!("{ms} ms"),
    }
}

/// The current time in epoch milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_durations() {
        let table: [(&str, Result<u64, &str>); 16] = [
            ("500ms", Ok(500)),
            ("0ms", Ok(0)),
            ("10s", Ok(10_000)),
            ("15m", Ok(900_000)),
            ("2h", Ok(7_200_000)),
            ("1d", Ok(86_400_000)),
            ("1h30m", Ok(5_400_000)),
            ("1m500ms", Ok(60_500)),
            (" 3s ", Ok(3_000)),
            ("15", Err("a unit")),
            ("", Err("empty")),
            ("m", Err("expected a number")),
            ("5x", Err("a unit")),
            ("5mss", Err("a unit")),
            ("-5s", Err("expected a number")),
            ("99999999999999999999d", Err("too large")),
        ];
        for (input, expected) in table {
            match (parse_duration(input), expected) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{input:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{input:?}: {got}"),
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn format_durations() {
        let table = [
            (0, "0ms"),
            (250, "250ms"),
            (1_000, "1s"),
            (2_500, "2.5s"),
            (59_999, "59.9s"),
            (900_000, "15m"),
            (5_400_000, "1h 30m"),
            (3_605_000, "1h"),
            (90_061_000, "1d 1h"),
        ];
        for (ms, want) in table {
            assert_eq!(format_duration(ms), want, "{ms}");
        }
    }

    #[test]
    fn relative_times() {
        assert_eq!(format_relative(1_000 + 900_000, 1_000), "in 15m");
        assert_eq!(format_relative(1_000, 4_000), "3s ago");
        assert_eq!(format_relative(5, 5), "now");
    }

    #[test]
    fn instants_round_trip() {
        let table = [
            ("2030-01-01T08:00:00Z", Ok(1_893_484_800_000)),
            ("2030-01-01T10:00:00+02:00", Ok(1_893_484_800_000)),
            ("2030-01-01T08:00:00.250Z", Ok(1_893_484_800_250)),
            ("1969-12-31T23:59:59Z", Err(())),
            ("tomorrow", Err(())),
        ];
        for (input, expected) in table {
            assert_eq!(parse_instant(input).map_err(|_| ()), expected, "{input}");
        }
        assert_eq!(
            format_instant(1_893_484_800_250),
            "2030-01-01T08:00:00.250Z"
        );
    }
}
