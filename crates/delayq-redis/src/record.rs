//! Reading a task's packed record and extras (see `scripts/lib.lua` for the format) back
//! into the views of `delayq_core`.

use delayq::{Attempt, Backoff, Millis, State, TaskInfo};

use crate::error::BackendError;

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
    pub body: String,
}

impl Record {
    /// Parses `header \n body`; `None` when it is not a record of ours.
    pub fn parse(raw: String) -> Option<Record> {
        let nl = raw.find('\n')?;
        let mut fields = raw[..nl].split(',');
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
        let created_at_ms = num(next())?;
        let updated_at_ms = opt(next())?.unwrap_or(created_at_ms);
        let ttr_ms = num(next())?;
        let max_retries = next()?.parse().ok()?;
        let retries = u32::try_from(opt(next())?.unwrap_or(0)).ok()?;
        let deadline_ms = opt(next())?.unwrap_or(0);
        let _receipt = next()?;
        Some(Record {
            state,
            due_ms,
            created_at_ms,
            updated_at_ms,
            ttr_ms,
            max_retries,
            retries,
            deadline_ms,
            body: raw[nl + 1..].to_owned(),
        })
    }

    /// Whether this is a FINISHED or CANCELLED record whose retention has passed at `now`:
    /// it no longer exists, whatever the promoter has or has not removed yet.
    pub fn is_expired(&self, now: Millis) -> bool {
        self.state.is_terminal() && self.deadline_ms <= now
    }
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
            let want = want.map(|(s, d, u, r, x, b)| (s, d, u, r, x, b.to_owned()));
            assert_eq!(got, want, "{raw:?}");
        }
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
    fn retention_ends_exactly_at_the_deadline() {
        let done = Record::parse("3,1,1,,5,3,,5000,\n".to_owned()).unwrap();
        assert!(!done.is_expired(4_999));
        assert!(done.is_expired(5_000));
        let active = Record::parse("2,1,1,,5,3,,5000,r\n".to_owned()).unwrap();
        assert!(!active.is_expired(9_999));
    }
}
