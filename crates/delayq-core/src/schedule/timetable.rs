//! The occurrence times of a schedule: a cron expression in an IANA time zone, or a fixed
//! interval, bounded by `start_ms` and `end_ms`.
//!
//! Cron is parsed and evaluated by the `croner` crate on `jiff` zoned times; the time zone
//! database is the one `jiff` carries in the binary, so every instance resolves a zone the
//! same way whatever the machine's `/usr/share/zoneinfo` says. Cron works in whole seconds:
//! an occurrence is a whole second, and the first one after `t` is the first whole second
//! strictly after `t` that matches.
//!
//! Daylight saving, as `croner` resolves it (OCPS 1.4) and the tests below pin down:
//! - **Gap** (spring forward, local times that do not exist): a job at a fixed time of day
//!   (`30 2 * * *`) whose time falls in the gap runs once at the first instant after the gap
//!   (03:00 local when clocks jump from 02:00 to 03:00); a job that repeats within the day
//!   (`*/30 * * * *`, `@hourly`) simply has no occurrence in the hour that does not exist.
//! - **Overlap** (fall back, local times that happen twice): a fixed-time job (`30 1 * * *`)
//!   runs once, at the first of the two instants; a repeating job runs in both halves, since
//!   both are real, distinct instants.
//!
//! An interval schedule (`every_ms`) ignores local time: its occurrences are
//! `start_ms + k * every_ms` (anchor 0, the epoch, when `start_ms` is absent), which no clock
//! change moves.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::task::Millis;
use crate::validate::InvalidField;

/// The occurrence times of one schedule.
#[derive(Debug, Clone)]
pub struct Timetable {
    kind: Kind,
    start_ms: Option<Millis>,
    end_ms: Option<Millis>,
}

#[derive(Debug, Clone)]
enum Kind {
    Every { every_ms: u64 },
    Cron { cron: Box<Cron>, tz: TimeZone },
}

impl Timetable {
    /// Occurrences every `every_ms` from `start_ms` (the epoch when absent) until `end_ms`.
    /// `every_ms` must be at least 1 (validation makes sure).
    pub fn every(every_ms: u64, start_ms: Option<Millis>, end_ms: Option<Millis>) -> Timetable {
        Timetable {
            kind: Kind::Every {
                every_ms: every_ms.max(1),
            },
            start_ms,
            end_ms,
        }
    }

    /// Occurrences of the cron expression `expr` in the IANA time zone `timezone`, within
    /// `start_ms..=end_ms`. A bad expression is an error naming `cron`, an unknown zone one
    /// naming `timezone`.
    pub fn cron(
        expr: &str,
        timezone: &str,
        start_ms: Option<Millis>,
        end_ms: Option<Millis>,
    ) -> Result<Timetable, InvalidField> {
        let tz = TimeZone::get(timezone).map_err(|_| {
            InvalidField::new(
                "timezone",
                format!(
                    "{timezone:?} is not a known IANA time zone (such as Europe/Berlin or UTC)"
                ),
            )
        })?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|e| {
                InvalidField::new(
                    "cron",
                    format!(
                        "{expr:?} is not a cron expression ({e}); give 5 fields (minute hour day month weekday), 6 with seconds first, or an alias such as @hourly"
                    ),
                )
            })?;
        Ok(Timetable {
            kind: Kind::Cron {
                cron: Box::new(cron),
                tz,
            },
            start_ms,
            end_ms,
        })
    }

    /// The first occurrence strictly after `t`, if the series has one.
    pub fn next_after(&self, t: Millis) -> Option<Millis> {
        // Before the start, the first candidate is the start itself.
        let from = match self.start_ms {
            Some(start) if start > t => {
                return self
                    .raw_next_at_or_after(start)
                    .filter(|&n| self.before_end(n));
            }
            _ => t,
        };
        self.raw_next_after(from).filter(|&n| self.before_end(n))
    }

    /// The latest occurrence at or before `t`, if the series has one.
    pub fn latest_at_or_before(&self, t: Millis) -> Option<Millis> {
        let t = match self.end_ms {
            Some(end) => t.min(end),
            None => t,
        };
        self.raw_latest_at_or_before(t)
            .filter(|&p| self.start_ms.is_none_or(|start| p >= start))
    }

    /// The next `n` occurrences after `t`.
    pub fn upcoming(&self, t: Millis, n: usize) -> Vec<Millis> {
        let mut out = Vec::with_capacity(n.min(1_000));
        let mut at = t;
        while out.len() < n {
            match self.next_after(at) {
                Some(next) => {
                    out.push(next);
                    at = next;
                }
                None => break,
            }
        }
        out
    }

    fn before_end(&self, t: Millis) -> bool {
        self.end_ms.is_none_or(|end| t <= end)
    }

    fn raw_next_at_or_after(&self, t: Millis) -> Option<Millis> {
        match t.checked_sub(1) {
            Some(before) => self.raw_next_after(before),
            None => match &self.kind {
                Kind::Every { .. } => Some(0),
                Kind::Cron { .. } => self.raw_next_after(0),
            },
        }
    }

    fn raw_next_after(&self, t: Millis) -> Option<Millis> {
        match &self.kind {
            Kind::Every { every_ms } => {
                let anchor = self.start_ms.unwrap_or(0);
                if t < anchor {
                    return Some(anchor);
                }
                let k = (t - anchor) / every_ms + 1;
                k.checked_mul(*every_ms)?.checked_add(anchor)
            }
            Kind::Cron { cron, tz } => {
                // Cron counts whole seconds: from the second `t` falls in, exclusive, is the
                // first whole second after `t`.
                let zoned = to_zoned(t / 1_000, tz)?;
                let next = cron.find_next_occurrence(&zoned, false).ok()?;
                millis_of(next.timestamp())
            }
        }
    }

    fn raw_latest_at_or_before(&self, t: Millis) -> Option<Millis> {
        match &self.kind {
            Kind::Every { every_ms } => {
                let anchor = self.start_ms.unwrap_or(0);
                if t < anchor {
                    return None;
                }
                Some(anchor + (t - anchor) / every_ms * every_ms)
            }
            Kind::Cron { cron, tz } => {
                let zoned = to_zoned(t / 1_000, tz)?;
                let prev = cron.find_previous_occurrence(&zoned, true).ok()?;
                millis_of(prev.timestamp())
            }
        }
    }
}

fn to_zoned(seconds: u64, tz: &TimeZone) -> Option<jiff::Zoned> {
    let ts = Timestamp::from_second(i64::try_from(seconds).ok()?).ok()?;
    Some(ts.to_zoned(tz.clone()))
}

fn millis_of(ts: Timestamp) -> Option<Millis> {
    u64::try_from(ts.as_millisecond()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Epoch ms of an RFC 3339 instant.
    fn at(text: &str) -> Millis {
        millis_of(text.parse::<Timestamp>().unwrap()).unwrap()
    }

    fn cron(expr: &str, tz: &str) -> Timetable {
        Timetable::cron(expr, tz, None, None).unwrap()
    }

    #[test]
    fn next_after_table() {
        // (what, cron, zone, after, expected next occurrences)
        let cases: &[(&str, &str, &str, &str, &[&str])] = &[
            (
                "5 fields",
                "*/15 * * * *",
                "UTC",
                "2026-01-01T00:07:00Z",
                &["2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z"],
            ),
            (
                "6 fields, seconds first",
                "*/20 * * * * *",
                "UTC",
                "2026-01-01T00:00:05Z",
                &[
                    "2026-01-01T00:00:20Z",
                    "2026-01-01T00:00:40Z",
                    "2026-01-01T00:01:00Z",
                ],
            ),
            (
                "strictly after an occurrence",
                "0 * * * *",
                "UTC",
                "2026-01-01T01:00:00Z",
                &["2026-01-01T02:00:00Z"],
            ),
            (
                "@hourly",
                "@hourly",
                "UTC",
                "2026-01-01T01:00:00.001Z",
                &["2026-01-01T02:00:00Z"],
            ),
            (
                "@daily in a zone",
                "@daily",
                "Europe/Berlin",
                "2026-01-01T12:00:00Z",
                &["2026-01-01T23:00:00Z", "2026-01-02T23:00:00Z"],
            ),
            (
                "weekday names",
                "0 9 * * MON",
                "UTC",
                "2026-01-01T00:00:00Z",
                &["2026-01-05T09:00:00Z"],
            ),
            // Spring forward in New York: 2026-03-08 02:00 EST → 03:00 EDT. 02:30 does not
            // exist; the fixed-time job runs once at the first instant after the gap, 03:00
            // EDT (07:00 UTC), then at 02:30 EDT the next day (06:30 UTC).
            (
                "gap: fixed time runs at the end of the gap",
                "30 2 * * *",
                "America/New_York",
                "2026-03-07T12:00:00Z",
                &["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"],
            ),
            // An hourly job has no 02:00 on that day: 01:00 EST, then 03:00 EDT.
            (
                "gap: hourly skips the missing hour",
                "0 * * * *",
                "America/New_York",
                "2026-03-08T05:30:00Z",
                &[
                    "2026-03-08T06:00:00Z",
                    "2026-03-08T07:00:00Z",
                    "2026-03-08T08:00:00Z",
                ],
            ),
            // Fall back in New York: 2026-11-01 02:00 EDT → 01:00 EST, 01:30 happens twice
            // (05:30 and 06:30 UTC). The fixed-time job runs once, at the first.
            (
                "overlap: fixed time runs once",
                "30 1 * * *",
                "America/New_York",
                "2026-10-31T12:00:00Z",
                &["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"],
            ),
            // A job repeating within the day runs in both halves: two real hours.
            (
                "overlap: hourly runs in both halves",
                "0 * * * *",
                "America/New_York",
                "2026-11-01T04:30:00Z",
                &[
                    "2026-11-01T05:00:00Z",
                    "2026-11-01T06:00:00Z",
                    "2026-11-01T07:00:00Z",
                ],
            ),
            // Europe: 2026-03-29 02:00 CET → 03:00 CEST.
            (
                "gap in Berlin",
                "30 2 * * *",
                "Europe/Berlin",
                "2026-03-28T12:00:00Z",
                &["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
            ),
        ];
        for (what, expr, tz, after, expected) in cases {
            let tt = cron(expr, tz);
            let got = tt.upcoming(at(after), expected.len());
            let expected: Vec<Millis> = expected.iter().map(|e| at(e)).collect();
            assert_eq!(got, expected, "{what}");
        }
    }

    #[test]
    fn latest_at_or_before_table() {
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                "on an occurrence",
                "0 * * * *",
                "2026-01-01T02:00:00Z",
                "2026-01-01T02:00:00Z",
            ),
            (
                "between",
                "0 * * * *",
                "2026-01-01T02:59:59.999Z",
                "2026-01-01T02:00:00Z",
            ),
            (
                "seconds",
                "*/10 * * * * *",
                "2026-01-01T00:00:25Z",
                "2026-01-01T00:00:20Z",
            ),
        ];
        for (what, expr, t, expected) in cases {
            assert_eq!(
                cron(expr, "UTC").latest_at_or_before(at(t)),
                Some(at(expected)),
                "{what}"
            );
        }
    }

    #[test]
    fn every_table() {
        // (what, every, start, end, after, expected)
        type Case<'a> = (&'a str, u64, Option<u64>, Option<u64>, u64, &'a [u64]);
        let cases: &[Case] = &[
            (
                "epoch anchored",
                1_000,
                None,
                None,
                10_500,
                &[11_000, 12_000],
            ),
            ("strictly after", 1_000, None, None, 11_000, &[12_000]),
            (
                "start is the first",
                1_000,
                Some(20_250),
                None,
                0,
                &[20_250, 21_250],
            ),
            (
                "start after t",
                1_000,
                Some(20_250),
                None,
                20_249,
                &[20_250],
            ),
            (
                "end bounds",
                1_000,
                None,
                Some(12_000),
                10_500,
                &[11_000, 12_000],
            ),
            ("after the end", 1_000, None, Some(12_000), 12_000, &[]),
        ];
        for (what, every, start, end, after, expected) in cases {
            let tt = Timetable::every(*every, *start, *end);
            assert_eq!(
                tt.upcoming(*after, expected.len().max(1)),
                expected.to_vec(),
                "{what}"
            );
        }
        let tt = Timetable::every(1_000, None, Some(12_000));
        assert_eq!(
            tt.upcoming(10_500, 5),
            vec![11_000, 12_000],
            "the end stops the series"
        );
        let tt = Timetable::every(1_000, Some(20_250), Some(30_000));
        assert_eq!(
            tt.latest_at_or_before(20_000),
            None,
            "nothing before the start"
        );
        assert_eq!(tt.latest_at_or_before(22_000), Some(21_250));
        assert_eq!(
            tt.latest_at_or_before(99_000),
            Some(29_250),
            "nothing after the end"
        );
    }

    #[test]
    fn cron_bounds() {
        let tt = Timetable::cron(
            "0 * * * *",
            "UTC",
            Some(at("2026-01-01T05:00:00Z")),
            Some(at("2026-01-01T06:00:00Z")),
        )
        .unwrap();
        assert_eq!(
            tt.upcoming(0, 5),
            vec![at("2026-01-01T05:00:00Z"), at("2026-01-01T06:00:00Z")]
        );
    }
}
