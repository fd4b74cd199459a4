//! Recurring schedules (docs/design.md §9): the model, its validation, the occurrence times and
//! the one decision a scheduler makes each time it looks ([`plan`]).
//!
//! A schedule is a recipe for tasks: each occurrence becomes an ordinary task with the id
//! `<name>@<due ms>` ([`occurrence_id`]). The id is a pure function of the schedule and the
//! occurrence, so any number of scheduler instances that add the same occurrence with
//! `on_duplicate: keep` add it once. Everything here is pure: the times come from the
//! schedule's definition and a cursor (the last occurrence added), never from a clock, so two
//! instances with slightly different clocks compute the same occurrences; only *when* they
//! look depends on their `now`.
//!
//! - [`ScheduleDef`]: a schedule as written (API, TOML, storage), validated by
//!   [`validate_schedule`] into a [`Schedule`] that carries its compiled [`Timetable`].
//! - [`Timetable`]: the occurrence times, of a cron expression in an IANA time zone or of a
//!   fixed interval (`timetable` module, where the daylight-saving behaviour is tested).
//! - [`plan`]: given the cursor and now, which occurrences to add and where the cursor goes.

mod timetable;

use serde::{Deserialize, Serialize};

pub use timetable::Timetable;

use crate::backoff::Backoff;
use crate::task::{MaxRetries, Millis, OnExpire, Priority};
use crate::trace::TraceContext;
use crate::validate::{InvalidField, Limits, check_backoff, check_duration, check_topic};

/// The smallest `every_ms` accepted unless configured otherwise ([`Limits::min_every_ms`]).
pub const DEFAULT_MIN_EVERY_MS: u64 = 1_000;

/// The longest schedule name: with `@` and a 20-digit due it stays within the id limit (256).
pub const MAX_NAME_LEN: usize = 200;

/// The characters besides ASCII letters and digits a schedule name may hold: the id charset
/// without `@` (it separates the name from the due in occurrence ids) and without `/` (the
/// name is the last segment of `/schedules/{topic}/{name}`, and a topic may hold `/`).
const NAME_EXTRA_CHARS: &str = "._:+=-";

/// The time zone of a cron schedule that names none.
pub const DEFAULT_TIMEZONE: &str = "UTC";

/// Most late occurrences one look adds one by one (those within the catch-up grace); older
/// ones count as missed. Bounds the work of one look whatever the interval.
pub const MAX_LATE_ADDS: usize = 1_000;

/// What happens to occurrences whose time passed while no scheduler ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Missed {
    /// All the missed occurrences together fire once, as the latest of them (the default).
    #[default]
    FireOnce,
    /// Missed occurrences do not fire; the schedule goes on with the next one.
    Skip,
}

/// A schedule as written: in `POST /schedules`, in the TOML file, and as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleDef {
    /// The topic its occurrences are added to.
    pub topic: String,
    /// Its name, unique in the topic: `[A-Za-z0-9._:+=-]{1,200}`.
    pub name: String,
    /// A cron expression (5 fields, or 6 with seconds first, or an alias such as `@hourly`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// A fixed interval instead of `cron`: occurrences at `start_ms + k * every_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// The IANA time zone of `cron` (default UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The body of every occurrence.
    #[serde(default)]
    pub body: Vec<u8>,
    /// The priority of every occurrence (the queue's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    /// The time to run of every occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    /// The redeliveries of every occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<MaxRetries>,
    /// The retry schedule of every occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// No occurrence before this instant; for `every_ms`, the anchor of the series (default 0,
    /// the epoch, so the series does not depend on when the schedule was created).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<Millis>,
    /// No occurrence after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<Millis>,
    /// A paused schedule adds no occurrence.
    #[serde(default)]
    pub paused: bool,
    /// What happens to occurrences missed while no scheduler ran.
    #[serde(default)]
    pub missed: Missed,
    /// The trace context of the request that created the schedule: each occurrence starts a
    /// trace of its own derived from it ([`occurrence_trace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// Every occurrence expires this long after its own due unless handed out before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
    /// What an occurrence's expiry does (DEAD when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expire: Option<OnExpire>,
}

/// The trace context of the occurrence of a schedule due at `due_ms`: a new trace per
/// occurrence (one trace a day for a daily report, not one trace for years), whose ids are
/// derived from the schedule's trace id, its name and the due, so every scheduler instance
/// that adds the same occurrence gives it the same context. It keeps the schedule's sampled
/// flag and tracestate. When delayq exports spans, the occurrence's first span links to the
/// schedule's context (docs/tracing.md).
pub fn occurrence_trace(schedule: &TraceContext, name: &str, due_ms: Millis) -> TraceContext {
    let seed = crate::hash::fnv1a(&[
        &schedule.trace_id().to_be_bytes(),
        name.as_bytes(),
        &due_ms.to_be_bytes(),
    ]);
    let hi = crate::hash::splitmix64(seed);
    let lo = crate::hash::splitmix64(hi);
    let span = crate::hash::splitmix64(lo);
    // splitmix64 is a bijection: at most one input gives zero; `max(1)` keeps the ids valid.
    let trace_id = (u128::from(hi) << 64 | u128::from(lo)).max(1);
    schedule
        .with_ids(trace_id, span.max(1))
        .unwrap_or_else(|| schedule.clone())
}

/// A validated schedule with its compiled timetable.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Schedule {
    /// The definition, as validated.
    pub def: ScheduleDef,
    /// Its occurrence times.
    pub timetable: Timetable,
}

/// Checks a schedule name: `[A-Za-z0-9._:+=-]{1,200}` (see `NAME_EXTRA_CHARS` for why `@`
/// and `/` are not allowed).
pub fn check_schedule_name(name: &str) -> Result<(), InvalidField> {
    if name.is_empty() {
        return Err(InvalidField::new("name", "must not be empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(InvalidField::new(
            "name",
            format!(
                "is {} characters long, the limit is {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || NAME_EXTRA_CHARS.contains(c);
    if let Some((at, ch)) = name.char_indices().find(|&(_, c)| !allowed(c)) {
        return Err(InvalidField::new(
            "name",
            format!(
                "has the character {ch:?} at byte {at}; allowed are letters, digits and {NAME_EXTRA_CHARS}"
            ),
        ));
    }
    Ok(())
}

/// The task id of the occurrence of schedule `name` due at `due_ms`.
pub fn occurrence_id(name: &str, due_ms: Millis) -> String {
    format!("{name}@{due_ms}")
}

/// The schedule name and due of an occurrence id, if `id` is one.
pub fn parse_occurrence_id(id: &str) -> Option<(&str, Millis)> {
    let (name, due) = id.rsplit_once('@')?;
    if check_schedule_name(name).is_err()
        || due.is_empty()
        || !due.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    Some((name, due.parse().ok()?))
}

/// Checks every field of `def` against `limits` and compiles its timetable. Each error names
/// the field.
pub fn validate_schedule(def: ScheduleDef, limits: &Limits) -> Result<Schedule, InvalidField> {
    check_topic(&def.topic)?;
    check_schedule_name(&def.name)?;
    if def.body.len() > limits.max_body_bytes {
        return Err(InvalidField::too_large(
            "body",
            format!(
                "is {} bytes, the limit is {} bytes",
                def.body.len(),
                limits.max_body_bytes
            ),
        ));
    }
    if let Some(ttr) = def.ttr_ms {
        if ttr == 0 {
            return Err(InvalidField::new("ttr_ms", "must be at least 1 ms"));
        }
        check_duration("ttr_ms", ttr, limits.max_ttr_ms)?;
    }
    if let Some(backoff) = &def.backoff {
        check_backoff(backoff, limits)?;
    }
    if let Some(expires_in) = def.expires_in_ms {
        if expires_in == 0 {
            return Err(InvalidField::new(
                "expires_in_ms",
                "must be at least 1 ms: an occurrence expiring at its due is never handed out",
            ));
        }
        check_duration("expires_in_ms", expires_in, limits.max_delay_ms)?;
    }
    if let (Some(start), Some(end)) = (def.start_ms, def.end_ms)
        && end < start
    {
        return Err(InvalidField::new(
            "end_ms",
            format!("is {end}, before start_ms ({start})"),
        ));
    }
    let timetable = match (&def.cron, def.every_ms) {
        (Some(_), Some(_)) => {
            return Err(InvalidField::new(
                "every_ms",
                "cannot be given together with cron; give exactly one of cron and every_ms",
            ));
        }
        (None, None) => {
            return Err(InvalidField::new(
                "cron",
                "is missing; give exactly one of cron and every_ms",
            ));
        }
        (None, Some(every)) => {
            if def.timezone.is_some() {
                return Err(InvalidField::new(
                    "timezone",
                    "applies to cron only; an every_ms schedule counts milliseconds, not local time",
                ));
            }
            if every < limits.min_every_ms {
                return Err(InvalidField::new(
                    "every_ms",
                    format!("is {every} ms, the minimum is {} ms", limits.min_every_ms),
                ));
            }
            check_duration("every_ms", every, limits.max_delay_ms)?;
            Timetable::every(every, def.start_ms, def.end_ms)
        }
        (Some(cron), None) => {
            let tz = def.timezone.as_deref().unwrap_or(DEFAULT_TIMEZONE);
            Timetable::cron(cron, tz, def.start_ms, def.end_ms)?
        }
    };
    Ok(Schedule { def, timetable })
}

/// What one look at a schedule decides ([`plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Plan {
    /// The dues of the occurrences to add, ascending; the last one is the pending occurrence
    /// when the series goes on.
    pub add: Vec<Millis>,
    /// The cursor after the adds: the latest occurrence added (unchanged when nothing is).
    pub cursor: Option<Millis>,
    /// The due of the pending occurrence, when the schedule has one after `now`: the moment
    /// to look again.
    pub wake_at: Option<Millis>,
}

/// The decision of one look at `schedule` at `now`, given its `cursor` (the latest occurrence
/// added, `None` for a schedule that has added none since it was created or resumed).
///
/// - A paused schedule adds nothing.
/// - While the cursor is after `now`, that occurrence is pending: nothing to add.
/// - Otherwise the pending occurrence has come. The occurrences after it up to `now` that are
///   at most `grace_ms` old are late, not missed: each is added (its task is due at once).
///   Older ones were missed: with [`Missed::FireOnce`] the latest of them is added, standing
///   for all; with [`Missed::Skip`] none is. Then the first occurrence after `now` is added as
///   the new pending one.
/// - Without a cursor, the first occurrence after `now` is added.
///
/// The dues come from the timetable and the cursor, so instances that look at slightly
/// different `now`s add the same ids (the only difference a skewed clock makes is which old
/// occurrences count as missed).
pub fn plan(schedule: &Schedule, cursor: Option<Millis>, now: Millis, grace_ms: u64) -> Plan {
    let tt = &schedule.timetable;
    if schedule.def.paused {
        return Plan {
            add: Vec::new(),
            cursor,
            wake_at: None,
        };
    }
    if let Some(c) = cursor
        && c > now
    {
        return Plan {
            add: Vec::new(),
            cursor,
            wake_at: Some(c),
        };
    }
    let mut add = Vec::new();
    if let Some(c) = cursor {
        // Occurrences in (c, now]: the late ones one by one, the missed ones per the policy.
        let late_from = now.saturating_sub(grace_ms);
        let missed_until = late_from.saturating_sub(1);
        if missed_until > c
            && schedule.def.missed == Missed::FireOnce
            && let Some(last_missed) = tt.latest_at_or_before(missed_until)
            && last_missed > c
        {
            add.push(last_missed);
        }
        let mut at = c.max(missed_until);
        while let Some(next) = tt.next_after(at) {
            if next > now || add.len() >= MAX_LATE_ADDS {
                break;
            }
            add.push(next);
            at = next;
        }
    }
    let pending = tt.next_after(now);
    add.extend(pending);
    Plan {
        cursor: add.last().copied().or(cursor),
        add,
        wake_at: pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every(ms: u64) -> Schedule {
        validate_schedule(
            ScheduleDef {
                topic: "t".into(),
                name: "n".into(),
                every_ms: Some(ms),
                ..ScheduleDef::default()
            },
            &Limits::default(),
        )
        .unwrap()
    }

    #[test]
    fn validation_names_the_field() {
        let ok = ScheduleDef {
            topic: "t".into(),
            name: "n".into(),
            cron: Some("*/5 * * * *".into()),
            ..ScheduleDef::default()
        };
        let cases: Vec<(&str, ScheduleDef, &str)> = vec![
            (
                "bad topic",
                ScheduleDef {
                    topic: "a b".into(),
                    ..ok.clone()
                },
                "topic",
            ),
            (
                "empty name",
                ScheduleDef {
                    name: "".into(),
                    ..ok.clone()
                },
                "name",
            ),
            (
                "@ in name",
                ScheduleDef {
                    name: "a@1".into(),
                    ..ok.clone()
                },
                "name",
            ),
            (
                "/ in name",
                ScheduleDef {
                    name: "a/b".into(),
                    ..ok.clone()
                },
                "name",
            ),
            (
                "long name",
                ScheduleDef {
                    name: "a".repeat(201),
                    ..ok.clone()
                },
                "name",
            ),
            (
                "bad cron",
                ScheduleDef {
                    cron: Some("61 * * * *".into()),
                    ..ok.clone()
                },
                "cron",
            ),
            (
                "cron words",
                ScheduleDef {
                    cron: Some("every minute".into()),
                    ..ok.clone()
                },
                "cron",
            ),
            (
                "7 fields",
                ScheduleDef {
                    cron: Some("0 0 0 * * * 2030".into()),
                    ..ok.clone()
                },
                "cron",
            ),
            (
                "no recurrence",
                ScheduleDef {
                    cron: None,
                    ..ok.clone()
                },
                "cron",
            ),
            (
                "both",
                ScheduleDef {
                    every_ms: Some(5_000),
                    ..ok.clone()
                },
                "every_ms",
            ),
            (
                "every too small",
                ScheduleDef {
                    cron: None,
                    every_ms: Some(999),
                    ..ok.clone()
                },
                "every_ms",
            ),
            (
                "every zero",
                ScheduleDef {
                    cron: None,
                    every_ms: Some(0),
                    ..ok.clone()
                },
                "every_ms",
            ),
            (
                "unknown zone",
                ScheduleDef {
                    timezone: Some("Mars/Olympus".into()),
                    ..ok.clone()
                },
                "timezone",
            ),
            (
                "zone with every",
                ScheduleDef {
                    cron: None,
                    every_ms: Some(1_000),
                    timezone: Some("UTC".into()),
                    ..ok.clone()
                },
                "timezone",
            ),
            (
                "ttr zero",
                ScheduleDef {
                    ttr_ms: Some(0),
                    ..ok.clone()
                },
                "ttr_ms",
            ),
            (
                "end before start",
                ScheduleDef {
                    start_ms: Some(10),
                    end_ms: Some(5),
                    ..ok.clone()
                },
                "end_ms",
            ),
            (
                "bad backoff",
                ScheduleDef {
                    backoff: Some(Backoff::Exponential {
                        base_ms: 0,
                        max_ms: 1,
                    }),
                    ..ok.clone()
                },
                "backoff.base_ms",
            ),
        ];
        for (what, def, field) in cases {
            let err = validate_schedule(def, &Limits::default()).expect_err(what);
            assert_eq!(err.field, field, "{what}: {err}");
        }
        assert!(validate_schedule(ok, &Limits::default()).is_ok());
        let limits = Limits {
            min_every_ms: 10,
            ..Limits::default()
        };
        let fast = ScheduleDef {
            topic: "t".into(),
            name: "n".into(),
            every_ms: Some(10),
            ..ScheduleDef::default()
        };
        assert!(
            validate_schedule(fast, &limits).is_ok(),
            "the minimum is configurable"
        );
    }

    #[test]
    fn occurrence_ids_round_trip() {
        assert_eq!(
            occurrence_id("daily.report", 1_700_000_000_000),
            "daily.report@1700000000000"
        );
        assert_eq!(
            parse_occurrence_id("daily.report@17"),
            Some(("daily.report", 17))
        );
        for bad in ["x", "x@", "@5", "x@5a", "a/b@5"] {
            assert_eq!(parse_occurrence_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn plan_table() {
        let s = every(1_000);
        let mut paused = s.clone();
        paused.def.paused = true;
        let mut skip = s.clone();
        skip.def.missed = Missed::Skip;
        // (what, schedule, cursor, now, grace, added, cursor after, wake)
        type Case<'a> = (
            &'a str,
            &'a Schedule,
            Option<u64>,
            u64,
            u64,
            Vec<u64>,
            Option<u64>,
            Option<u64>,
        );
        let cases: Vec<Case> = vec![
            (
                "fresh: the next after now",
                &s,
                None,
                10_500,
                0,
                vec![11_000],
                Some(11_000),
                Some(11_000),
            ),
            (
                "fresh on an occurrence: strictly after",
                &s,
                None,
                10_000,
                0,
                vec![11_000],
                Some(11_000),
                Some(11_000),
            ),
            (
                "pending not yet due",
                &s,
                Some(11_000),
                10_999,
                0,
                vec![],
                Some(11_000),
                Some(11_000),
            ),
            (
                "pending due: add the next",
                &s,
                Some(11_000),
                11_000,
                0,
                vec![12_000],
                Some(12_000),
                Some(12_000),
            ),
            (
                "looked late within grace",
                &s,
                Some(11_000),
                13_200,
                5_000,
                vec![12_000, 13_000, 14_000],
                Some(14_000),
                Some(14_000),
            ),
            (
                "missed: fire once as the latest",
                &s,
                Some(11_000),
                60_500,
                2_000,
                vec![58_000, 59_000, 60_000, 61_000],
                Some(61_000),
                Some(61_000),
            ),
            (
                "missed, no grace",
                &s,
                Some(11_000),
                60_500,
                0,
                vec![60_000, 61_000],
                Some(61_000),
                Some(61_000),
            ),
            (
                "missed: skip",
                &skip,
                Some(11_000),
                60_500,
                2_000,
                vec![59_000, 60_000, 61_000],
                Some(61_000),
                Some(61_000),
            ),
            (
                "missed: skip, no grace",
                &skip,
                Some(11_000),
                60_500,
                0,
                vec![61_000],
                Some(61_000),
                Some(61_000),
            ),
            (
                "paused adds nothing",
                &paused,
                Some(11_000),
                60_500,
                0,
                vec![],
                Some(11_000),
                None,
            ),
        ];
        for (what, sched, cursor, now, grace, added, after, wake) in cases {
            let p = plan(sched, cursor, now, grace);
            assert_eq!(p.add, added, "{what}");
            assert_eq!(p.cursor, after, "{what}");
            assert_eq!(p.wake_at, wake, "{what}");
            assert!(
                p.add.iter().all(|&d| cursor.is_none_or(|c| d > c)),
                "{what}: nothing at or before the cursor again"
            );
        }
    }

    #[test]
    fn plan_stops_at_the_end() {
        let mut s = every(1_000);
        s.def.end_ms = Some(12_000);
        s.timetable = Timetable::every(1_000, None, Some(12_000));
        assert_eq!(plan(&s, Some(11_000), 11_000, 0).add, vec![12_000]);
        let over = plan(&s, Some(12_000), 12_000, 0);
        assert_eq!(
            (over.add, over.cursor, over.wake_at),
            (vec![], Some(12_000), None)
        );
    }

    #[test]
    fn the_same_occurrences_whatever_the_look_time() {
        // Two instances looking at slightly different moments add the same ids.
        let s = every(1_000);
        let a = plan(&s, Some(11_000), 11_003, 5_000);
        let b = plan(&s, Some(11_000), 11_950, 5_000);
        assert_eq!(a.add, b.add);
    }

    #[test]
    fn each_occurrence_starts_its_own_trace() {
        let schedule = TraceContext::parse(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("a=1"),
        )
        .unwrap();
        let first = occurrence_trace(&schedule, "daily", 1_000);
        let second = occurrence_trace(&schedule, "daily", 2_000);
        // New traces, not the schedule's; distinct per occurrence and per schedule name.
        assert_ne!(first.trace_id(), schedule.trace_id());
        assert_ne!(first.trace_id(), second.trace_id());
        assert_ne!(
            first.trace_id(),
            occurrence_trace(&schedule, "hourly", 1_000).trace_id()
        );
        // The same occurrence gets the same context on every instance.
        assert_eq!(first, occurrence_trace(&schedule, "daily", 1_000));
        assert!(first.sampled());
        assert_eq!(first.tracestate(), Some("a=1"));
    }
}
