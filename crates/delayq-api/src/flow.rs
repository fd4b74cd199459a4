//! Flow limits on the wire (docs/design.md §11): `POST /limits` sets a topic's limits,
//! `GET /limits` shows them, `DELETE /limits` removes them. The checks are the library's
//! ([`delayq_core::FlowLimits::check`]); this module only reads the numbers strictly, so a
//! negative or fractional count is a 400 naming its field, never a wrap-around.

use delayq_core::FlowLimits;
use delayq_core::flow::MAX_LIMIT;
use delayq_core::validate::InvalidField;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::number::Count;

/// `POST /limits`: a topic's limits, replacing the ones it had. At least one limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsRequest {
    /// The topic; it need not have tasks yet.
    pub topic: String,
    /// At most this many of the topic's tasks ACTIVE at once (1 to 1000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 5)]
    pub max_active: Option<Count>,
    /// At most this many hand-outs a second on average (0.001 to 1000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(example = 50.0)]
    pub rate_per_s: Option<f64>,
    /// Hand-outs that may go at once after a quiet time (with `rate_per_s`; default: one
    /// second's worth of the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>)]
    pub burst: Option<Count>,
    /// At most this many ACTIVE tasks of one `key` at once (1 to 1000000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<u64>, example = 1)]
    pub max_active_per_key: Option<Count>,
}

impl LimitsRequest {
    /// The names of its fields, as serde reads them (the keys of a `[[flow_limits]]` table).
    pub fn fields() -> &'static [&'static str] {
        crate::number::struct_fields::<LimitsRequest>()
    }

    /// The library's limits (checked there against their ranges).
    pub fn limits(&self) -> Result<FlowLimits, InvalidField> {
        let count = |field: &str, n: Option<Count>| {
            n.map(|Count(n)| {
                u32::try_from(n).map_err(|_| {
                    InvalidField::new(field, format!("is {n}, it must be 1 to {MAX_LIMIT}"))
                })
            })
            .transpose()
        };
        let mut limits = FlowLimits::default();
        limits.max_active = count("max_active", self.max_active)?;
        limits.rate_per_s = self.rate_per_s;
        limits.burst = count("burst", self.burst)?;
        limits.max_active_per_key = count("max_active_per_key", self.max_active_per_key)?;
        limits.check()?;
        Ok(limits)
    }

    /// The request that sets `limits` on `topic`.
    pub fn new(topic: impl Into<String>, limits: &FlowLimits) -> Self {
        LimitsRequest {
            topic: topic.into(),
            max_active: limits.max_active.map(|n| Count(n.into())),
            rate_per_s: limits.rate_per_s,
            burst: limits.burst.map(|n| Count(n.into())),
            max_active_per_key: limits.max_active_per_key.map(|n| Count(n.into())),
        }
    }
}

/// One topic's limits as `GET /limits` shows them (the burst in effect included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LimitsView {
    /// The topic.
    pub topic: String,
    /// At most this many ACTIVE at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active: Option<u32>,
    /// At most this many hand-outs a second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// The burst in effect (given, or one second of the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// At most this many ACTIVE tasks of one key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active_per_key: Option<u32>,
}

impl LimitsView {
    /// The view of `topic`'s `limits`.
    pub fn new(topic: impl Into<String>, limits: &FlowLimits) -> Self {
        LimitsView {
            topic: topic.into(),
            max_active: limits.max_active,
            rate_per_s: limits.rate_per_s,
            burst: limits.effective_burst(),
            max_active_per_key: limits.max_active_per_key,
        }
    }
}

/// The query of `GET /limits` (one topic, or every topic with limits) and `DELETE /limits`
/// (one topic).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LimitsQuery {
    /// The topic; `GET` without it lists every topic with limits.
    #[serde(default)]
    pub topic: Option<String>,
}

/// The `data` of `GET /limits`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LimitsList {
    /// The topics with limits, by name.
    pub limits: Vec<LimitsView>,
    /// How many.
    pub total: u64,
}

/// The `data` of `DELETE /limits`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LimitsDeleted {
    /// The topic.
    pub topic: String,
    /// Whether it had limits.
    pub deleted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_strictly_and_checked_by_the_library() {
        let table: [(&str, Result<FlowLimits, &str>); 6] = [
            (
                r#"{"topic":"t","max_active":5}"#,
                Ok(FlowLimits::max_active(5)),
            ),
            (
                r#"{"topic":"t","rate_per_s":2.5,"max_active_per_key":1}"#,
                Ok(FlowLimits::default()
                    .with_rate(2.5, None)
                    .with_max_active_per_key(1)),
            ),
            (r#"{"topic":"t","max_active":0}"#, Err("max_active")),
            (
                r#"{"topic":"t","max_active":5000000000}"#,
                Err("max_active"),
            ),
            (r#"{"topic":"t","burst":3}"#, Err("burst")),
            (r#"{"topic":"t"}"#, Err("max_active")),
        ];
        for (json, expected) in table {
            let req: LimitsRequest = serde_json::from_str(json).unwrap();
            assert_eq!(
                req.limits().map_err(|e| e.field),
                expected.map_err(str::to_owned),
                "{json}"
            );
        }
        for bad in [
            r#"{"topic":"t","max_active":-1}"#,
            r#"{"topic":"t","max_active":1.5}"#,
            r#"{"topic":"t","max_actve":1}"#,
        ] {
            assert!(serde_json::from_str::<LimitsRequest>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_request_round_trips_the_limits() {
        let limits = FlowLimits::max_active(3)
            .with_rate(10.0, Some(4))
            .with_max_active_per_key(2);
        assert_eq!(LimitsRequest::new("t", &limits).limits(), Ok(limits));
        let view = LimitsView::new("t", &FlowLimits::default().with_rate(7.5, None));
        assert_eq!(view.burst, Some(8), "the burst in effect is shown");
    }
}
