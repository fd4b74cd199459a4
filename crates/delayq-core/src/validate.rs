//! Validation at the edge (docs/design.md §5): every field of a request is checked against the
//! configured [`Limits`], and the error names the field and the limit.
//!
//! A [`NewTask`] that passes becomes a [`TaskSpec`]: defaults filled in, the due time made
//! absolute. Backends only ever see specs, so no invalid value reaches storage.

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;
use crate::task::{
    DEFAULT_PRIORITY, Expiry, MaxRetries, Millis, NewTask, OnDuplicate, OnExpire, Priority, State,
    When,
};
use crate::trace::TraceContext;

/// Ten years of milliseconds (365.25-day years): the longest delay docs/design.md §2 rule 12 accepts.
pub const TEN_YEARS_MS: u64 = 315_576_000_000;

/// The largest page of a listing, unless configured lower: the one page-size limit of the
/// library, the HTTP API (which clamps a larger `page_size` to it, as seqdelay does) and the
/// server's `max_page_size` setting.
pub const MAX_PAGE_SIZE: u64 = 1_000;

/// A field of a request that failed validation, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct InvalidField {
    /// The field, as named in the API (`tasks[3].id` inside a batch).
    pub field: String,
    /// What is wrong with it, naming the limit.
    pub reason: String,
    /// Whether the value is over a size limit (HTTP 413) rather than malformed (HTTP 400).
    pub too_large: bool,
}

impl InvalidField {
    /// An error for `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        InvalidField {
            field: field.into(),
            reason: reason.into(),
            too_large: false,
        }
    }

    /// An error for a `field` whose value is larger than a size limit allows.
    pub fn too_large(field: impl Into<String>, reason: impl Into<String>) -> Self {
        InvalidField {
            too_large: true,
            ..InvalidField::new(field, reason)
        }
    }

    /// The same error for a field inside an element of a list, e.g. `tasks[3].id`.
    pub fn within(mut self, prefix: &str) -> Self {
        self.field = format!("{prefix}.{}", self.field);
        self
    }
}

/// The configurable limits every input is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Limits {
    /// Largest body in bytes (default 1 MiB).
    pub max_body_bytes: usize,
    /// Most tasks in one batch add (default 10 000).
    pub max_batch: usize,
    /// Longest delay, also the furthest `run_at_ms` ahead (default 10 years).
    pub max_delay_ms: u64,
    /// Longest time to run (default 1 day).
    pub max_ttr_ms: u64,
    /// Most entries in a backoff schedule (default 64).
    pub max_schedule_len: usize,
    /// Most tasks one pop may return (default 1 000).
    pub max_pop_count: usize,
    /// Longest long-poll (default 60 s).
    pub max_pop_timeout_ms: u64,
    /// Longest error text kept on release (default 4 KiB); longer text is cut, not refused.
    pub max_error_bytes: usize,
    /// Largest page of a listing (default 1 000).
    pub max_page_size: u64,
    /// Smallest `every_ms` of a schedule (default 1 s).
    pub min_every_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 1 << 20,
            max_batch: 10_000,
            max_delay_ms: TEN_YEARS_MS,
            max_ttr_ms: 86_400_000,
            max_schedule_len: 64,
            max_pop_count: 1_000,
            max_pop_timeout_ms: 60_000,
            max_error_bytes: 4_096,
            max_page_size: MAX_PAGE_SIZE,
            min_every_ms: crate::schedule::DEFAULT_MIN_EVERY_MS,
        }
    }
}

/// The values a task gets when its producer leaves them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct TaskDefaults {
    /// Default time to run (30 s).
    pub ttr_ms: u64,
    /// Default redeliveries (3).
    pub max_retries: MaxRetries,
    /// How long FINISHED and CANCELLED records are kept (60 s).
    pub retention_ms: u64,
}

impl Default for TaskDefaults {
    fn default() -> Self {
        TaskDefaults {
            ttr_ms: 30_000,
            max_retries: MaxRetries::Limited(3),
            retention_ms: 60_000,
        }
    }
}

/// A validated task: what a backend stores.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskSpec {
    /// The topic, valid per [`check_topic`].
    pub topic: String,
    /// The id, valid per [`check_id`].
    pub id: String,
    /// The payload.
    pub body: Vec<u8>,
    /// Lower first.
    pub priority: Priority,
    /// When the task was received.
    pub created_at_ms: Millis,
    /// When it becomes due (absolute).
    pub due_ms: Millis,
    /// Time to run.
    pub ttr_ms: u64,
    /// Redeliveries allowed.
    pub max_retries: MaxRetries,
    /// Retry schedule.
    pub backoff: Option<Backoff>,
    /// Duplicate policy.
    pub on_duplicate: OnDuplicate,
    /// The producer's trace context, if given.
    pub trace: Option<TraceContext>,
    /// When the task expires unless handed out before (absolute, after `due_ms`).
    pub expires_at_ms: Option<Millis>,
    /// What its expiry does.
    pub on_expire: OnExpire,
    /// The flow-control key, valid per [`check_key`].
    pub key: Option<String>,
}

/// The longest topic name: beanstalkd's longest tube name, so every tube is a topic.
pub const MAX_TOPIC_LEN: usize = 200;

/// Checks a topic name: `[A-Za-z0-9._:+/;$()-]{1,200}`, the union of delayq's first charset
/// and beanstalkd's tube names (docs/design.md §1, §7).
pub fn check_topic(topic: &str) -> Result<(), InvalidField> {
    check_name("topic", topic, MAX_TOPIC_LEN, TOPIC_EXTRA_CHARS)
}

/// The characters besides ASCII letters and digits a topic may hold.
const TOPIC_EXTRA_CHARS: &str = "._:+/;$()-";

/// The characters besides ASCII letters and digits an id may hold.
const ID_EXTRA_CHARS: &str = "._:@/+=-";

/// Checks a task id: `[A-Za-z0-9._:@/+=-]{1,256}`.
pub fn check_id(id: &str) -> Result<(), InvalidField> {
    check_name("id", id, 256, ID_EXTRA_CHARS)
}

/// Checks a flow-control key: the id's character set, `[A-Za-z0-9._:@/+=-]{1,256}`.
pub fn check_key(key: &str) -> Result<(), InvalidField> {
    check_name("key", key, 256, ID_EXTRA_CHARS)
}

fn check_name(field: &str, value: &str, max: usize, extra: &str) -> Result<(), InvalidField> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || extra.as_bytes().contains(&b);
    if value.is_empty() {
        return Err(InvalidField::new(field, "must not be empty"));
    }
    if value.len() > max {
        return Err(InvalidField::new(
            field,
            format!("is {} characters long, the limit is {max}", value.len()),
        ));
    }
    if let Some(bad) = value.bytes().position(|b| !allowed(b)) {
        let ch = value[bad..].chars().next().unwrap_or('?');
        return Err(InvalidField::new(
            field,
            format!(
                "has the character {ch:?} at byte {bad}; allowed are letters, digits and {extra}"
            ),
        ));
    }
    Ok(())
}

/// Checks a delay (or a ttr, or a backoff entry) against a maximum.
pub fn check_duration(field: &str, value: u64, max: u64) -> Result<(), InvalidField> {
    if value > max {
        return Err(InvalidField::new(
            field,
            format!("is {value} ms, the limit is {max} ms"),
        ));
    }
    Ok(())
}

/// Reads a state filter given by name (`ready`) or code (`1`): the one reading of a state
/// named in a request, for the HTTP API and the dashboard alike.
pub fn parse_state(field: &str, text: &str) -> Result<State, InvalidField> {
    State::parse(text).ok_or_else(|| {
        let names: Vec<String> = State::ALL
            .iter()
            .map(|s| format!("{} ({})", s.name(), s.code()))
            .collect();
        InvalidField::new(
            field,
            format!("is {text:?}; accepted are {}", names.join(", ")),
        )
    })
}

/// Checks the options of a pop: `count` from 1 to `max_pop_count`, a long-poll of at most
/// `max_pop_timeout_ms`. The one check of both, for the library and the HTTP API alike.
pub fn check_pop(count: u64, timeout_ms: u64, limits: &Limits) -> Result<(), InvalidField> {
    let max_count = limits.max_pop_count;
    if count == 0 || count > max_count as u64 {
        return Err(InvalidField::new(
            "count",
            format!("is {count}, it must be 1 to {max_count} (max_pop_count)"),
        ));
    }
    let max_timeout = limits.max_pop_timeout_ms;
    if timeout_ms > max_timeout {
        return Err(InvalidField::new(
            "timeout_ms",
            format!("is {timeout_ms} ms, the limit is {max_timeout} ms (max_pop_timeout_ms)"),
        ));
    }
    Ok(())
}

/// Checks an absolute due (`run_at_ms`) against the longest delay and returns the due it
/// means: a past instant means now, so a task is never due before it was added or moved.
pub fn check_run_at(at: Millis, now: Millis, limits: &Limits) -> Result<Millis, InvalidField> {
    check_ahead("run_at_ms", at, now, limits)?;
    Ok(at.max(now))
}

/// Checks that the instant `at` given in `field` is at most the longest delay ahead of `now`.
fn check_ahead(field: &str, at: Millis, now: Millis, limits: &Limits) -> Result<(), InvalidField> {
    let ahead = at.saturating_sub(now);
    if ahead > limits.max_delay_ms {
        return Err(InvalidField::new(
            field,
            format!(
                "is {ahead} ms in the future, the limit is {} ms",
                limits.max_delay_ms
            ),
        ));
    }
    Ok(())
}

/// Turns a producer's task into a spec: checks every field, fills defaults, makes the due
/// time absolute (`due = now + delay_ms`, docs/design.md §2 rule 12).
pub fn validate_task(
    task: NewTask,
    limits: &Limits,
    defaults: &TaskDefaults,
    now: Millis,
) -> Result<TaskSpec, InvalidField> {
    check_topic(&task.topic)?;
    check_id(&task.id)?;
    if let Some(key) = &task.key {
        check_key(key)?;
    }
    if task.body.len() > limits.max_body_bytes {
        return Err(InvalidField::too_large(
            "body",
            format!(
                "is {} bytes, the limit is {} bytes",
                task.body.len(),
                limits.max_body_bytes
            ),
        ));
    }
    let due_ms = match task.when {
        When::Delay(delay) => {
            check_duration("delay_ms", delay, limits.max_delay_ms)?;
            now.saturating_add(delay)
        }
        When::At(at) => check_run_at(at, now, limits)?,
    };
    let expires_at_ms = task
        .expiry
        .map(|e| check_expiry(e, due_ms, now, limits))
        .transpose()?;
    let ttr_ms = task.ttr_ms.unwrap_or(defaults.ttr_ms);
    if ttr_ms == 0 {
        return Err(InvalidField::new("ttr_ms", "must be at least 1 ms"));
    }
    check_duration("ttr_ms", ttr_ms, limits.max_ttr_ms)?;
    if let Some(backoff) = &task.backoff {
        check_backoff(backoff, limits)?;
    }
    Ok(TaskSpec {
        topic: task.topic,
        id: task.id,
        body: task.body,
        priority: task.priority.unwrap_or(DEFAULT_PRIORITY),
        created_at_ms: now,
        due_ms,
        ttr_ms,
        max_retries: task.max_retries.unwrap_or(defaults.max_retries),
        backoff: task.backoff,
        on_duplicate: task.on_duplicate,
        trace: task.trace,
        expires_at_ms,
        on_expire: task.on_expire,
        key: task.key,
    })
}

/// Checks a task's expiry and returns it as an absolute instant: within the longest delay
/// ahead, and after the task's due (an expiry at or before the due could never let the task
/// be handed out, so it is a mistake, not a policy).
pub fn check_expiry(
    expiry: Expiry,
    due_ms: Millis,
    now: Millis,
    limits: &Limits,
) -> Result<Millis, InvalidField> {
    let (field, at) = match expiry {
        Expiry::In(ms) => {
            check_duration("expires_in_ms", ms, limits.max_delay_ms)?;
            ("expires_in_ms", now.saturating_add(ms))
        }
        Expiry::At(at) => {
            check_ahead("expires_at_ms", at, now, limits)?;
            ("expires_at_ms", at)
        }
    };
    check_expiry_after_due(field, at, due_ms)?;
    Ok(at)
}

/// Checks that an expiry comes after a due: the one rule shared by add and reschedule.
pub fn check_expiry_after_due(
    field: &str,
    expires_at_ms: Millis,
    due_ms: Millis,
) -> Result<(), InvalidField> {
    if expires_at_ms <= due_ms {
        return Err(InvalidField::new(
            field,
            format!(
                "expires at {expires_at_ms}, at or before the task's due ({due_ms}); \
                 an expiry must come after the due"
            ),
        ));
    }
    Ok(())
}

/// Cuts `text` to at most `max` bytes on a character boundary: error texts over
/// [`Limits::max_error_bytes`] are cut, not refused.
pub fn truncate_utf8(text: &mut String, max: usize) {
    if text.len() > max {
        let mut cut = max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
}

/// Checks a retry schedule: every wait within the delay limit, a bounded schedule length.
pub fn check_backoff(backoff: &Backoff, limits: &Limits) -> Result<(), InvalidField> {
    match backoff {
        Backoff::Fixed { ms } => check_duration("backoff.ms", *ms, limits.max_delay_ms),
        Backoff::Exponential { base_ms, max_ms } => {
            if *base_ms == 0 {
                return Err(InvalidField::new(
                    "backoff.base_ms",
                    "must be at least 1 ms",
                ));
            }
            if max_ms < base_ms {
                return Err(InvalidField::new(
                    "backoff.max_ms",
                    format!("is {max_ms} ms, less than base_ms ({base_ms} ms)"),
                ));
            }
            check_duration("backoff.max_ms", *max_ms, limits.max_delay_ms)
        }
        Backoff::Schedule { ms } => {
            if ms.is_empty() {
                return Err(InvalidField::new(
                    "backoff.ms",
                    "must list at least one wait",
                ));
            }
            if ms.len() > limits.max_schedule_len {
                return Err(InvalidField::new(
                    "backoff.ms",
                    format!(
                        "lists {} waits, the limit is {}",
                        ms.len(),
                        limits.max_schedule_len
                    ),
                ));
            }
            ms.iter().enumerate().try_for_each(|(i, v)| {
                check_duration(&format!("backoff.ms[{i}]"), *v, limits.max_delay_ms)
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Millis = 1_800_000_000_000;

    #[test]
    fn state_filters_by_name_or_code() {
        assert_eq!(parse_state("state", "ready"), Ok(State::Ready));
        assert_eq!(parse_state("state", "DEAD"), Ok(State::Dead));
        assert_eq!(parse_state("state", "2"), Ok(State::Active));
        let err = parse_state("state", "done").unwrap_err();
        assert_eq!(err.field, "state");
        assert!(
            err.reason.contains("accepted are delayed (0), ready (1)"),
            "{err}"
        );
    }

    #[test]
    fn pop_limits() {
        let limits = Limits::default();
        assert_eq!(check_pop(1, 0, &limits), Ok(()));
        let max = limits.max_pop_count as u64;
        assert_eq!(check_pop(max, limits.max_pop_timeout_ms, &limits), Ok(()));
        for count in [0, max + 1] {
            let err = check_pop(count, 0, &limits).unwrap_err();
            assert_eq!(err.field, "count");
            assert!(err.reason.contains("(max_pop_count)"), "{err}");
        }
        let err = check_pop(1, limits.max_pop_timeout_ms + 1, &limits).unwrap_err();
        assert_eq!(err.field, "timeout_ms");
        assert!(err.reason.contains("(max_pop_timeout_ms)"), "{err}");
    }

    #[test]
    fn topic_and_id_charsets() {
        let long_topic = "t".repeat(201);
        let long_id = "i".repeat(257);
        let table: [(&str, &str, bool); 12] = [
            ("orders", "order-1", true),
            ("a.b_c:d-e", "x@y/z+w=v.1_2:3-4", true),
            // Every character of a beanstalkd tube name.
            ("tube+/;$()-._", "1", true),
            ("orders{7}", "x", false),
            ("", "x", false),
            ("orders", "", false),
            ("or ders", "x", false),
            ("orders", "a b", false),
            ("orders#", "x", false),
            ("örders", "x", false),
            (&long_topic, "x", false),
            ("orders", &long_id, false),
        ];
        for (topic, id, ok) in table {
            let got = check_topic(topic).and_then(|_| check_id(id));
            assert_eq!(got.is_ok(), ok, "{topic:?} {id:?}: {got:?}");
        }
        assert_eq!(check_topic(&"t".repeat(200)), Ok(()));
        assert_eq!(check_id(&"i".repeat(256)), Ok(()));
    }

    #[test]
    fn errors_name_field_and_limit() {
        let e = check_topic(&"t".repeat(201)).unwrap_err();
        assert_eq!(e.field, "topic");
        assert!(e.reason.contains("200"), "{e}");
        let e = check_id("a b").unwrap_err();
        assert_eq!(e.field, "id");
        assert!(e.reason.contains("' '"), "{e}");
    }

    fn validate(task: NewTask) -> Result<TaskSpec, InvalidField> {
        validate_task(task, &Limits::default(), &TaskDefaults::default(), NOW)
    }

    #[test]
    fn due_is_absolute_and_bounded() {
        let table: [(When, Result<Millis, &str>); 7] = [
            (When::Delay(0), Ok(NOW)),
            (When::Delay(1_500), Ok(NOW + 1_500)),
            (When::Delay(TEN_YEARS_MS), Ok(NOW + TEN_YEARS_MS)),
            (When::Delay(TEN_YEARS_MS + 1), Err("delay_ms")),
            (When::Delay(u64::MAX), Err("delay_ms")),
            (When::At(NOW - 5_000), Ok(NOW)),
            (When::At(NOW + TEN_YEARS_MS + 1), Err("run_at_ms")),
        ];
        for (when, want) in table {
            let mut task = NewTask::new("t", "i");
            task.when = when;
            let got = validate(task).map(|s| s.due_ms).map_err(|e| e.field);
            assert_eq!(got, want.map_err(str::to_owned), "{when:?}");
        }
    }

    #[test]
    fn expiry_is_absolute_after_the_due_and_bounded() {
        // (delay, expiry, expires_at_ms or the field named)
        let table: [(u64, Expiry, Result<Millis, &str>); 9] = [
            (0, Expiry::In(1), Ok(NOW + 1)),
            (1_000, Expiry::In(1_001), Ok(NOW + 1_001)),
            (1_000, Expiry::In(1_000), Err("expires_in_ms")),
            (1_000, Expiry::In(999), Err("expires_in_ms")),
            (0, Expiry::In(0), Err("expires_in_ms")),
            (0, Expiry::In(TEN_YEARS_MS + 1), Err("expires_in_ms")),
            (1_000, Expiry::At(NOW + 1_001), Ok(NOW + 1_001)),
            (1_000, Expiry::At(NOW + 1_000), Err("expires_at_ms")),
            (0, Expiry::At(NOW + TEN_YEARS_MS + 1), Err("expires_at_ms")),
        ];
        for (delay, expiry, want) in table {
            let mut task = NewTask::new("t", "i").delay_ms(delay);
            task.expiry = Some(expiry);
            let got = validate(task).map(|s| s.expires_at_ms.unwrap());
            assert_eq!(
                got.map_err(|e| e.field),
                want.map_err(str::to_owned),
                "{expiry:?}"
            );
        }
        let e = validate(NewTask::new("t", "i").delay_ms(5).expires_in_ms(5)).unwrap_err();
        assert!(e.reason.contains("at or before the task's due"), "{e}");
        let spec = validate(NewTask::new("t", "i")).unwrap();
        assert_eq!((spec.expires_at_ms, spec.on_expire), (None, OnExpire::Dead));
    }

    #[test]
    fn defaults_fill_missing_options() {
        let spec = validate(NewTask::new("t", "i")).unwrap();
        assert_eq!(spec.ttr_ms, 30_000);
        assert_eq!(spec.max_retries, MaxRetries::Limited(3));
        assert_eq!(spec.on_duplicate, OnDuplicate::Reject);
        let spec = validate(
            NewTask::new("t", "i")
                .ttr_ms(5)
                .max_retries(MaxRetries::Unlimited),
        )
        .unwrap();
        assert_eq!((spec.ttr_ms, spec.max_retries), (5, MaxRetries::Unlimited));
    }

    #[test]
    fn bad_fields_are_named() {
        let big_body = "x".repeat((1 << 20) + 1);
        let table: [(NewTask, &str); 7] = [
            (NewTask::new("t", "i").body(big_body), "body"),
            (NewTask::new("t", "i").ttr_ms(0), "ttr_ms"),
            (NewTask::new("t", "i").ttr_ms(86_400_001), "ttr_ms"),
            (
                NewTask::new("t", "i").backoff(Backoff::Schedule { ms: vec![] }),
                "backoff.ms",
            ),
            (
                NewTask::new("t", "i").backoff(Backoff::Schedule {
                    ms: vec![1, TEN_YEARS_MS + 1],
                }),
                "backoff.ms[1]",
            ),
            (
                NewTask::new("t", "i").backoff(Backoff::Exponential {
                    base_ms: 10,
                    max_ms: 5,
                }),
                "backoff.max_ms",
            ),
            (
                NewTask::new("t", "i").backoff(Backoff::Exponential {
                    base_ms: 0,
                    max_ms: 5,
                }),
                "backoff.base_ms",
            ),
        ];
        for (task, field) in table {
            let e = validate(task).unwrap_err();
            assert_eq!(e.field, field);
            assert_eq!(e.too_large, field == "body", "{e}");
        }
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        let table = [
            ("hello", 10, "hello"),
            ("hello", 3, "hel"),
            ("héllo", 2, "h"),
            ("", 0, ""),
        ];
        for (input, max, want) in table {
            let mut s = input.to_owned();
            truncate_utf8(&mut s, max);
            assert_eq!(s, want);
        }
    }

    #[test]
    fn within_prefixes_batch_fields() {
        let e = InvalidField::new("id", "must not be empty").within("tasks[3]");
        assert_eq!(e.field, "tasks[3].id");
        assert_eq!(e.to_string(), "invalid tasks[3].id: must not be empty");
    }
}
