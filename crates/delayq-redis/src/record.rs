//! Reading a task's record (a Redis hash, see `scripts/lib.lua` for its fields) back into
//! the views of `delayq_core`.

use std::collections::HashMap;

use delayq::{Attempt, Backoff, Millis, State, TaskInfo};

use crate::error::BackendError;

/// A record's fields as `HGETALL` returns them.
pub(crate) type Fields = HashMap<String, String>;

/// Whether the record is a FINISHED or CANCELLED one whose retention has passed at `now`:
/// it no longer exists, whatever the promoter has or has not removed yet.
pub(crate) fn is_expired(fields: &Fields, now: Millis) -> bool {
    let state = fields.get("s").and_then(|s| s.parse::<u8>().ok());
    let terminal = matches!(
        state.and_then(State::from_code),
        Some(State::Finished | State::Cancelled)
    );
    terminal && num(fields, "x").unwrap_or(0) <= now
}

fn num(fields: &Fields, name: &str) -> Option<u64> {
    fields.get(name).and_then(|v| v.parse().ok())
}

/// The full view of a task from its record.
pub(crate) fn task_info(
    topic: &str,
    id: &str,
    mut fields: Fields,
    op: &str,
) -> Result<TaskInfo, BackendError> {
    let bad = |what: &str| BackendError::protocol(op, format!("task {id:?}: bad field {what}"));
    let state = fields
        .get("s")
        .and_then(|s| s.parse::<u8>().ok())
        .and_then(State::from_code)
        .ok_or_else(|| bad("s (state)"))?;
    let due_ms = num(&fields, "d").ok_or_else(|| bad("d (due)"))?;
    let created_at_ms = num(&fields, "c").ok_or_else(|| bad("c (created)"))?;
    let ttr_ms = num(&fields, "t").ok_or_else(|| bad("t (ttr)"))?;
    let max_retries: i64 = fields
        .get("m")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| bad("m (max retries)"))?;
    let retries = fields
        .get("r")
        .map(|v| v.parse::<u32>())
        .transpose()
        .map_err(|_| bad("r (retries)"))?
        .unwrap_or(0);
    let updated_at_ms = num(&fields, "u").unwrap_or(created_at_ms);
    let deadline_ms = match state {
        State::Active | State::Finished | State::Cancelled => num(&fields, "x").filter(|&x| x != 0),
        State::Delayed | State::Ready | State::Dead => None,
    };
    let backoff = fields
        .get("k")
        .map(|k| serde_json::from_str::<Backoff>(k))
        .transpose()
        .map_err(|_| bad("k (backoff)"))?;
    let history = match fields.get("h") {
        Some(h) => h
            .lines()
            .map(serde_json::from_str::<Attempt>)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad("h (history)"))?,
        None => Vec::new(),
    };
    Ok(TaskInfo {
        id: id.to_owned(),
        topic: topic.to_owned(),
        body: fields.remove("b").unwrap_or_default(),
        state,
        due_ms,
        delay_ms: due_ms.saturating_sub(created_at_ms),
        ttr_ms,
        max_retries,
        retries,
        created_at_ms,
        updated_at_ms,
        backoff,
        deadline_ms,
        last_error: fields.remove("e"),
        history,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_failed_task_reads_back() {
        let f = fields(&[
            ("b", "hello"),
            ("s", "0"),
            ("d", "2000"),
            ("c", "1000"),
            ("u", "1500"),
            ("t", "30000"),
            ("m", "3"),
            ("r", "1"),
            ("k", r#"{"kind":"fixed","ms":500}"#),
            ("e", "boom"),
            (
                "h",
                "{\"started_at_ms\":1200,\"ended_at_ms\":1500,\"outcome\":\"released\",\"error\":\"boom\"}\n\
                 {\"started_at_ms\":1600,\"ended_at_ms\":1700,\"outcome\":\"ttr_expired\"}",
            ),
        ]);
        let info = task_info("t", "i", f, "testing").unwrap();
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
    }

    #[test]
    fn retention_ends_exactly_at_the_deadline() {
        let f = fields(&[("s", "3"), ("x", "5000")]);
        assert!(!is_expired(&f, 4_999));
        assert!(is_expired(&f, 5_000));
        let active = fields(&[("s", "2"), ("x", "5000")]);
        assert!(!is_expired(&active, 9_999));
    }
}
