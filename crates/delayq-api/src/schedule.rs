//! The wire shapes of recurring schedules (`/schedules`, docs/design.md §9): what a client
//! sends to create one, how one is shown, and the keys and queries of the other endpoints.
//! The same [`ScheduleRequest`] is the shape of a `[[schedules]]` table of the server's TOML
//! file, so a schedule is written the same way everywhere.

use delayq_core::schedule::{Missed, ScheduleDef};
use delayq_core::{Backoff, InvalidField, MaxRetries, Millis, OnExpire};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::body::{BodyEncoding, decode_body, encode_body};
use crate::number::{BodyText, Count, WholeMillis};
use crate::trace::{trace_fields, trace_of};

/// How many upcoming occurrences `GET /schedules/{topic}/{name}` shows unless `next` says.
pub const DEFAULT_NEXT: u64 = 10;

/// `POST /schedules`: creates a schedule, or replaces the definition of the one with the same
/// topic and name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleRequest {
    /// The topic its occurrences are added to.
    #[schema(example = "reports")]
    pub topic: String,
    /// The name, unique in the topic: `[A-Za-z0-9._:+=-]{1,200}`. Occurrence ids are
    /// `<name>@<due ms>`.
    #[schema(example = "daily-report")]
    pub name: String,
    /// A cron expression: 5 fields (minute hour day month weekday), 6 with seconds first, or
    /// an alias (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`). Excludes `every_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "30 2 * * *")]
    pub cron: Option<String>,
    /// A fixed interval instead of `cron`: occurrences at `start_ms + k * every_ms` (from
    /// the epoch when `start_ms` is absent). At least the server's `min_every_ms` (1 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub every_ms: Option<WholeMillis>,
    /// The IANA time zone `cron` is read in (default `UTC`); only with `cron`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = "Europe/Berlin")]
    pub timezone: Option<String>,
    /// The body of every occurrence: text, or base64 with `body_encoding: "base64"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub body: Option<BodyText>,
    /// How `body` is written: `text` (default) or `base64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_encoding: Option<BodyEncoding>,
    /// The priority of every occurrence (default 1024).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// The time to run of every occurrence (default: server setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub ttr_ms: Option<WholeMillis>,
    /// The redeliveries of every occurrence: a count, or -1 for no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub max_retries: Option<MaxRetries>,
    /// The retry schedule of every occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// No occurrence before this epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub start_ms: Option<WholeMillis>,
    /// No occurrence after this epoch ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub end_ms: Option<WholeMillis>,
    /// Create it paused (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Occurrences missed while no instance ran: `fire_once` (default; one fires for all) or
    /// `skip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed: Option<Missed>,
    /// The W3C `traceparent` of the span that creates the schedule (the request's header
    /// when absent); each occurrence starts a new trace derived from it (docs/tracing.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` that goes with `traceparent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// Every occurrence expires this many ms after its own due unless handed out before
    /// (docs/flow-control.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub expires_in_ms: Option<WholeMillis>,
    /// What an occurrence's expiry does: `dead` (default) or `drop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expire: Option<OnExpire>,
}

impl ScheduleRequest {
    /// The names of its fields, as serde reads them: the keys a `[[schedules]]` table of the
    /// server's configuration may hold, so that a list of them need not be written again.
    pub fn fields() -> &'static [&'static str] {
        crate::number::struct_fields::<ScheduleRequest>()
    }

    /// The library's definition. Only the body's encoding can be wrong here; the scheduler
    /// checks everything else against the queue's limits.
    pub fn into_def(self) -> Result<ScheduleDef, InvalidField> {
        let mut def = ScheduleDef::default();
        def.topic = self.topic;
        def.name = self.name;
        def.cron = self.cron;
        def.every_ms = self.every_ms.map(|m| m.0);
        def.timezone = self.timezone;
        if let Some(body) = self.body {
            def.body = decode_body(body.0, self.body_encoding, "body")?;
        }
        def.priority = self.priority;
        def.ttr_ms = self.ttr_ms.map(|m| m.0);
        def.max_retries = self.max_retries;
        def.backoff = self.backoff;
        def.start_ms = self.start_ms.map(|m| m.0);
        def.end_ms = self.end_ms.map(|m| m.0);
        def.paused = self.paused.unwrap_or(false);
        def.missed = self.missed.unwrap_or_default();
        def.trace = trace_of(self.traceparent.as_deref(), self.tracestate.as_deref())?;
        def.expires_in_ms = self.expires_in_ms.map(|m| m.0);
        def.on_expire = self.on_expire;
        Ok(def)
    }
}

/// `POST /schedules/pause`, `/schedules/resume`, `/schedules/delete`: one schedule.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct ScheduleKey {
    /// The topic.
    pub topic: String,
    /// The schedule's name.
    pub name: String,
}

/// `GET /schedules` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SchedulesQuery {
    /// Only the schedules of this topic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
}

/// `GET /schedules/{topic}/{name}` parameters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ScheduleQuery {
    /// How many upcoming occurrences to list (default 10, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[param(value_type = Option<u64>)]
    pub next: Option<Count>,
}

/// A schedule as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    /// The topic.
    pub topic: String,
    /// The name.
    pub name: String,
    /// The cron expression, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The interval, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    /// The time zone of `cron` (`UTC` when none was given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// The body of every occurrence (text, or base64 per `body_encoding`).
    pub body: String,
    /// `base64` when the body is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_encoding: Option<BodyEncoding>,
    /// The priority of every occurrence, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// The time to run of every occurrence, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttr_ms: Option<u64>,
    /// The redeliveries of every occurrence, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<i64>)]
    pub max_retries: Option<MaxRetries>,
    /// The retry schedule of every occurrence, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
    /// No occurrence before this, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<Millis>,
    /// No occurrence after this, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<Millis>,
    /// Whether it is paused.
    pub paused: bool,
    /// What happens to missed occurrences.
    pub missed: Missed,
    /// When it was created.
    pub created_at_ms: Millis,
    /// When it was last changed.
    pub updated_at_ms: Millis,
    /// The latest occurrence added as a task; while it is in the future it is the pending
    /// occurrence, whose task id is `<name>@<cursor_ms>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor_ms: Option<Millis>,
    /// The next occurrences that will fire if nothing changes (none while paused).
    pub next_ms: Vec<Millis>,
    /// The W3C `traceparent` the schedule was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The W3C `tracestate` the schedule was created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// How long after its due each occurrence expires, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
    /// What an occurrence's expiry does, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_expire: Option<OnExpire>,
}

impl ScheduleView {
    /// The view of `def` with its times and upcoming occurrences.
    pub fn new(
        def: ScheduleDef,
        created_at_ms: Millis,
        updated_at_ms: Millis,
        cursor_ms: Option<Millis>,
        next_ms: Vec<Millis>,
    ) -> Self {
        let (body, body_encoding) = encode_body(def.body);
        let (traceparent, tracestate) = trace_fields(def.trace.as_ref());
        let timezone = match (&def.cron, def.timezone) {
            (Some(_), None) => Some(delayq_core::schedule::DEFAULT_TIMEZONE.to_owned()),
            (_, tz) => tz,
        };
        ScheduleView {
            topic: def.topic,
            name: def.name,
            cron: def.cron,
            every_ms: def.every_ms,
            timezone,
            body,
            body_encoding,
            priority: def.priority,
            ttr_ms: def.ttr_ms,
            max_retries: def.max_retries,
            backoff: def.backoff,
            start_ms: def.start_ms,
            end_ms: def.end_ms,
            paused: def.paused,
            missed: def.missed,
            created_at_ms,
            updated_at_ms,
            cursor_ms,
            next_ms,
            traceparent,
            tracestate,
            expires_in_ms: def.expires_in_ms,
            on_expire: def.on_expire,
        }
    }
}

/// The `data` of `POST /schedules`: what happened and the schedule as it now stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PutScheduleData {
    /// `created`, `updated` or `unchanged`.
    pub outcome: String,
    /// The schedule with its next occurrences.
    pub schedule: ScheduleView,
}

/// The `data` of `GET /schedules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    /// The schedules, by topic and name, each with its next occurrence.
    pub schedules: Vec<ScheduleView>,
    /// How many.
    pub total: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_are_the_keys_of_a_full_request() {
        let full = ScheduleRequest {
            cron: Some("@daily".into()),
            every_ms: Some(WholeMillis(1)),
            timezone: Some("UTC".into()),
            body: Some(BodyText("b".into())),
            body_encoding: Some(BodyEncoding::Text),
            priority: Some(1),
            ttr_ms: Some(WholeMillis(1)),
            max_retries: Some(MaxRetries::Limited(1)),
            backoff: Some(Backoff::Fixed { ms: 1 }),
            start_ms: Some(WholeMillis(1)),
            end_ms: Some(WholeMillis(1)),
            paused: Some(true),
            missed: Some(Missed::Skip),
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            tracestate: Some("a=1".into()),
            expires_in_ms: Some(WholeMillis(1)),
            on_expire: Some(OnExpire::Drop),
            ..ScheduleRequest::default()
        };
        let json = serde_json::to_value(&full).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut fields = ScheduleRequest::fields().to_vec();
        keys.sort_unstable();
        fields.sort_unstable();
        assert_eq!(keys, fields);
    }

    #[test]
    fn a_request_becomes_a_definition() {
        let req: ScheduleRequest = serde_json::from_str(
            r#"{"topic":"t","name":"n","cron":"@hourly","timezone":"Europe/Berlin",
                "body":"/wCA","body_encoding":"base64","missed":"skip","paused":true}"#,
        )
        .unwrap();
        let def = req.into_def().unwrap();
        assert_eq!(def.body, vec![0xff, 0x00, 0x80]);
        assert_eq!(def.missed, Missed::Skip);
        assert!(def.paused);
        let bad: ScheduleRequest =
            serde_json::from_str(r#"{"topic":"t","name":"n","body":"!","body_encoding":"base64"}"#)
                .unwrap();
        assert_eq!(bad.into_def().unwrap_err().field, "body");
        let view = ScheduleView::new(
            ScheduleRequest {
                topic: "t".into(),
                name: "n".into(),
                cron: Some("@daily".into()),
                ..ScheduleRequest::default()
            }
            .into_def()
            .unwrap(),
            1,
            2,
            None,
            vec![3],
        );
        assert_eq!(
            view.timezone.as_deref(),
            Some("UTC"),
            "the default zone is shown"
        );
    }
}
