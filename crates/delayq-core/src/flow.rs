//! Flow control (docs/design.md §11): a topic's limits on hand-outs, and the rate they allow.
//!
//! A topic may set three limits, each optional:
//! - `max_active`: at most so many of its tasks ACTIVE at once;
//! - `rate_per_s` with `burst`: at most `burst` hand-outs at once after a quiet time, and
//!   `rate_per_s` a second on average, so over any window of `w` seconds at most
//!   `burst + rate_per_s × w` tasks are handed out;
//! - `max_active_per_key`: at most so many ACTIVE tasks of one key (a task's `key`, e.g. a
//!   merchant); tasks without a key are bound only by the topic's limits.
//!
//! The rate is a generic cell rate algorithm (GCRA): one number, the theoretical arrival
//! time `tat` of the next hand-out, stands for the whole bucket, so a backend that keeps it in
//! Redis updates one field in the same script that hands the task out. Hand-outs are spaced
//! `1000 / rate_per_s` ms apart on average; a hand-out is allowed at `now` while
//! `tat - now < burst × interval`. [`take`] is the one implementation: the engine calls it,
//! and the Redis scripts do the same arithmetic (`scripts/lib.lua`, checked against this by a
//! test).

use serde::{Deserialize, Serialize};

use crate::task::Millis;
use crate::validate::InvalidField;

/// The largest `max_active`, `max_active_per_key` and `burst`.
pub const MAX_LIMIT: u32 = 1_000_000;

/// The largest `rate_per_s`.
pub const MAX_RATE_PER_S: f64 = 1_000_000.0;

/// The smallest `rate_per_s`: one hand-out in 1 000 s.
pub const MIN_RATE_PER_S: f64 = 0.001;

/// The limits of one topic (docs/design.md §11). `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct FlowLimits {
    /// At most this many tasks of the topic ACTIVE at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active: Option<u32>,
    /// At most this many hand-outs a second on average.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// Hand-outs that may go at once after a quiet time (with `rate_per_s`; default: one
    /// second's worth of the rate, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// At most this many ACTIVE tasks of one key at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active_per_key: Option<u32>,
}

impl FlowLimits {
    /// Limits with only `max_active`.
    pub fn max_active(n: u32) -> Self {
        FlowLimits {
            max_active: Some(n),
            ..FlowLimits::default()
        }
    }

    /// The same limits with a rate of `rate_per_s` and the given burst (`None`: the default).
    pub fn with_rate(mut self, rate_per_s: f64, burst: Option<u32>) -> Self {
        self.rate_per_s = Some(rate_per_s);
        self.burst = burst;
        self
    }

    /// The same limits with `max_active_per_key`.
    pub fn with_max_active_per_key(mut self, n: u32) -> Self {
        self.max_active_per_key = Some(n);
        self
    }

    /// The same limits with `max_active`.
    pub fn with_max_active(mut self, n: u32) -> Self {
        self.max_active = Some(n);
        self
    }

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        self.max_active.is_none() && self.rate_per_s.is_none() && self.max_active_per_key.is_none()
    }

    /// The burst in effect: the one given, else one second's worth of the rate (at least 1).
    pub fn effective_burst(&self) -> Option<u32> {
        let rate = self.rate_per_s?;
        Some(
            self.burst
                .unwrap_or_else(|| rate.ceil().clamp(1.0, f64::from(MAX_LIMIT)) as u32),
        )
    }

    /// Checks every limit: counts from 1 to [`MAX_LIMIT`], a rate from [`MIN_RATE_PER_S`] to
    /// [`MAX_RATE_PER_S`], a burst only with a rate, and at least one limit.
    pub fn check(&self) -> Result<(), InvalidField> {
        let count = |field: &str, n: Option<u32>| match n {
            Some(n) if !(1..=MAX_LIMIT).contains(&n) => Err(InvalidField::new(
                field,
                format!("is {n}, it must be 1 to {MAX_LIMIT}"),
            )),
            _ => Ok(()),
        };
        count("max_active", self.max_active)?;
        count("max_active_per_key", self.max_active_per_key)?;
        if let Some(r) = self.rate_per_s
            && !(r.is_finite() && (MIN_RATE_PER_S..=MAX_RATE_PER_S).contains(&r))
        {
            return Err(InvalidField::new(
                "rate_per_s",
                format!("is {r}, it must be {MIN_RATE_PER_S} to {MAX_RATE_PER_S}"),
            ));
        }
        if self.burst.is_some() && self.rate_per_s.is_none() {
            return Err(InvalidField::new("burst", "needs rate_per_s"));
        }
        count("burst", self.burst)?;
        if self.is_empty() {
            return Err(InvalidField::new(
                "max_active",
                "no limit given: set at least one of max_active, rate_per_s, \
                 max_active_per_key (DELETE /limits removes a topic's limits)",
            ));
        }
        Ok(())
    }

    /// The rate as the GCRA needs it, when there is one.
    pub fn rate(&self) -> Option<Rate> {
        Some(Rate {
            interval_ms: 1_000.0 / self.rate_per_s?,
            burst: self.effective_burst()?,
        })
    }
}

/// A rate as [`take`] reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Milliseconds between hand-outs on average (`1000 / rate_per_s`).
    pub interval_ms: f64,
    /// Hand-outs allowed at once.
    pub burst: u32,
}

/// What [`take`] allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Taken {
    /// How many hand-outs may go now (at most the `want` asked).
    pub n: u32,
    /// The new theoretical arrival time, once those `n` are handed out: a caller that hands
    /// out fewer calls [`take`] with the number it handed out instead.
    pub tat: f64,
    /// When none may go: the instant the next one may.
    pub next_at: Option<Millis>,
}

/// The GCRA: how many of `want` hand-outs the rate allows at `now`, given the theoretical
/// arrival time `tat` (0 for a bucket never used: a full burst).
pub fn take(rate: Rate, tat: f64, now: Millis, want: u32) -> Taken {
    let now_f = now as f64;
    let tat = tat.max(now_f);
    // Hand-outs fit while tat - now < burst × interval; each moves tat one interval on.
    let room = (now_f + f64::from(rate.burst) * rate.interval_ms - tat) / rate.interval_ms;
    // A rounding hair below a whole number still counts as that number.
    let fits = (room + 1e-9).floor().max(0.0);
    let n = fits.min(f64::from(want)) as u32;
    let next_at = (n == 0 && want > 0).then(|| {
        // The first hand-out fits once tat - now < burst × interval, i.e. at
        // tat - (burst - 1) × interval.
        let at = tat - f64::from(rate.burst.saturating_sub(1)) * rate.interval_ms;
        (at.ceil() as Millis).max(now + 1)
    });
    Taken {
        n,
        tat: tat + f64::from(n) * rate.interval_ms,
        next_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(per_s: f64, burst: u32) -> Rate {
        FlowLimits::default()
            .with_rate(per_s, Some(burst))
            .rate()
            .expect("a rate")
    }

    #[test]
    fn the_burst_goes_at_once_then_the_rate() {
        let r = rate(10.0, 3); // a hand-out every 100 ms, 3 at once
        // (tat before, now, want) -> (n, next_at)
        let table: [(f64, Millis, u32, u32, Option<Millis>); 7] = [
            (0.0, 1_000, 5, 3, None),            // a fresh bucket: the whole burst
            (1_300.0, 1_000, 1, 0, Some(1_100)), // spent: the next at tat - 2 intervals
            (1_300.0, 1_100, 5, 1, None),        // 100 ms later: one more
            (1_300.0, 1_300, 5, 3, None),        // 300 ms later: the burst has refilled
            (1_300.0, 5_000, 9, 3, None),        // long quiet: never more than the burst
            (0.0, 1_000, 0, 0, None),            // asked for none: none, no next
            (1_000.0, 1_000, 2, 2, None),        // tat = now: as fresh, 2 of the burst's 3
        ];
        for (tat, now, want, n, next_at) in table {
            let got = take(r, tat, now, want);
            assert_eq!(
                (got.n, got.next_at),
                (n, next_at),
                "tat {tat} now {now} want {want}"
            );
        }
    }

    #[test]
    fn over_any_window_at_most_burst_plus_rate_times_window() {
        // Ask as often as possible (every ms) for 10 s: the count of hand-outs within any
        // window of w ms never exceeds burst + rate × w.
        for (per_s, burst) in [(10.0, 3), (0.5, 1), (250.0, 10), (1_000.0, 1), (3.3, 7)] {
            let r = rate(per_s, burst);
            let mut tat = 0.0;
            let mut times = Vec::new();
            for now in 0..10_000u64 {
                let got = take(r, tat, now, 1_000);
                tat = got.tat;
                times.extend(std::iter::repeat_n(now, got.n as usize));
            }
            for (i, &start) in times.iter().enumerate() {
                for (j, &end) in times.iter().enumerate().skip(i) {
                    let w_s = (end - start) as f64 / 1_000.0;
                    let bound = f64::from(burst) + per_s * w_s;
                    assert!(
                        (j - i + 1) as f64 <= bound + 1e-6,
                        "{per_s}/s burst {burst}: {} hand-outs in [{start}, {end}] ms",
                        j - i + 1
                    );
                }
                if i > 400 {
                    break; // the start of the run is where a burst can overrun
                }
            }
            // And the rate is reached: over 10 s about rate × 10 + burst.
            let expected = (per_s * 10.0).floor() + f64::from(burst);
            assert!(
                (times.len() as f64 - expected).abs() <= 1.0,
                "{per_s}/s burst {burst}: {} hand-outs in 10 s, expected about {expected}",
                times.len()
            );
        }
    }

    #[test]
    fn next_at_is_when_one_fits() {
        let r = rate(2.0, 1); // every 500 ms
        let first = take(r, 0.0, 10_000, 1);
        assert_eq!(first.n, 1);
        let refused = take(r, first.tat, 10_001, 1);
        assert_eq!((refused.n, refused.next_at), (0, Some(10_500)));
        assert_eq!(take(r, first.tat, 10_499, 1).n, 0);
        assert_eq!(take(r, first.tat, 10_500, 1).n, 1);
    }

    #[test]
    fn limits_are_checked_naming_the_field() {
        let ok = [
            FlowLimits::max_active(1),
            FlowLimits::max_active(MAX_LIMIT),
            FlowLimits::default().with_rate(0.001, None),
            FlowLimits::default().with_rate(50.0, Some(1)),
            FlowLimits::default().with_max_active_per_key(5),
        ];
        for l in ok {
            assert_eq!(l.check(), Ok(()), "{l:?}");
        }
        let bad = [
            (FlowLimits::max_active(0), "max_active"),
            (FlowLimits::max_active(MAX_LIMIT + 1), "max_active"),
            (
                FlowLimits::default().with_max_active_per_key(0),
                "max_active_per_key",
            ),
            (FlowLimits::default().with_rate(0.0, None), "rate_per_s"),
            (FlowLimits::default().with_rate(-1.0, None), "rate_per_s"),
            (
                FlowLimits::default().with_rate(f64::NAN, None),
                "rate_per_s",
            ),
            (FlowLimits::default().with_rate(2e6, None), "rate_per_s"),
            (FlowLimits::default().with_rate(5.0, Some(0)), "burst"),
            (
                FlowLimits {
                    burst: Some(3),
                    ..FlowLimits::max_active(1)
                },
                "burst",
            ),
            (FlowLimits::default(), "max_active"),
        ];
        for (l, field) in bad {
            assert_eq!(
                l.check().map_err(|e| e.field),
                Err(field.to_owned()),
                "{l:?}"
            );
        }
    }

    #[test]
    fn the_default_burst_is_a_second_of_the_rate() {
        let table = [(0.5, 1), (1.0, 1), (7.2, 8), (1_000.0, 1_000)];
        for (per_s, burst) in table {
            let l = FlowLimits::default().with_rate(per_s, None);
            assert_eq!(l.effective_burst(), Some(burst), "{per_s}");
        }
        assert_eq!(FlowLimits::max_active(3).effective_burst(), None);
    }
}
