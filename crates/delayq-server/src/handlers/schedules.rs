//! Recurring schedules (docs/design.md §9, `docs/schedules.md`): `POST /schedules` creates or
//! replaces one, `GET /schedules[?topic=]` lists them, `GET` and `DELETE`
//! `/schedules/{topic}/{name}` read and delete one, and `POST /schedules/pause`,
//! `/schedules/resume` and `/schedules/delete` take `{topic, name}` like the other writes of
//! the API.
//!
//! A topic may hold `/` and a name may not, so in `/schedules/{topic}/{name}` the name is the
//! last segment and the topic everything before it. The work is the [`delayq::Scheduler`]'s;
//! the loop of `delayq serve` adds the occurrences.

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use delayq::{ScheduleInfo, Scheduler};
use delayq_api::schedule::DEFAULT_NEXT;
use delayq_api::{PutScheduleData, ScheduleList, ScheduleQuery, ScheduleView};

use super::{Body, Query, Reply};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::{JsonBody, QueryParams};
use delayq_api::endpoint;

super::handles!(
    endpoint::PutSchedule => put_schedule,
    endpoint::ListSchedules => list_schedules,
    endpoint::GetSchedule => get_schedule,
    endpoint::DeleteScheduleAt => delete_schedule_at,
    endpoint::DeleteSchedule => delete_schedule,
    endpoint::PauseSchedule => pause_schedule,
    endpoint::ResumeSchedule => resume_schedule,
);

fn view(info: ScheduleInfo) -> ScheduleView {
    ScheduleView::new(
        info.def,
        info.created_at_ms,
        info.updated_at_ms,
        info.cursor_ms,
        info.upcoming_ms,
    )
}

/// Splits `topic/name` at its last `/`.
fn split_path(path: &str) -> Result<(&str, &str), AppError> {
    path.rsplit_once('/').ok_or_else(|| {
        AppError::invalid("name", "is missing: the path is /schedules/{topic}/{name}")
    })
}

fn scheduler(state: &AppState) -> &Scheduler {
    state.scheduler()
}

/// The handler of [`endpoint::PutSchedule`] (its summary and answers are in the table).
pub async fn put_schedule(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(req): Body<endpoint::PutSchedule>,
) -> Reply<endpoint::PutSchedule> {
    caller.check_topic(&req.topic, "topic")?;
    let header = super::add::header_trace(&headers).map_err(delayq::Error::from)?;
    let mut def = req.into_def().map_err(delayq::Error::from)?;
    // The request's headers stand in for fields it does not have, as for `/add`.
    if def.trace.is_none() {
        def.trace = header;
    }
    let (topic, name) = (def.topic.clone(), def.name.clone());
    let outcome = scheduler(&state).put(def).await?;
    let info = scheduler(&state)
        .get(&topic, &name, DEFAULT_NEXT as usize)
        .await?;
    Ok(ok(PutScheduleData {
        outcome: outcome.name().to_owned(),
        schedule: view(info),
    }))
}

/// The handler of [`endpoint::ListSchedules`] (its summary and answers are in the table).
pub async fn list_schedules(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::ListSchedules>,
) -> Reply<endpoint::ListSchedules> {
    if let Some(topic) = &q.topic {
        caller.check_topic(topic, "topic")?;
    }
    let all = scheduler(&state).list(q.topic.as_deref(), 1).await?;
    let schedules: Vec<ScheduleView> = all
        .into_iter()
        .filter(|s| caller.may_use(&s.def.topic))
        .map(view)
        .collect();
    Ok(ok(ScheduleList {
        total: schedules.len(),
        schedules,
    }))
}

/// The handler of [`endpoint::GetSchedule`] (its summary and answers are in the table).
pub async fn get_schedule(
    State(state): State<AppState>,
    caller: Caller,
    Path(path): Path<String>,
    QueryParams(q): QueryParams<ScheduleQuery>,
) -> Reply<endpoint::GetSchedule> {
    let (topic, name) = split_path(&path)?;
    caller.check_topic(topic, "topic")?;
    let next = q.next.map_or(DEFAULT_NEXT, |n| n.0);
    let max = delayq::schedule::MAX_UPCOMING as u64;
    if next > max {
        return Err(AppError::invalid(
            "next",
            format!("is {next}, the limit is {max}"),
        ));
    }
    let info = scheduler(&state).get(topic, name, next as usize).await?;
    Ok(ok(view(info)))
}

/// The handler of [`endpoint::DeleteScheduleAt`] (its summary and answers are in the table).
pub async fn delete_schedule_at(
    State(state): State<AppState>,
    caller: Caller,
    Path(path): Path<String>,
) -> Reply<endpoint::DeleteScheduleAt> {
    let (topic, name) = split_path(&path)?;
    caller.check_topic(topic, "topic")?;
    scheduler(&state).delete(topic, name).await?;
    Ok(ok(None))
}

/// The handler of [`endpoint::DeleteSchedule`] (its summary and answers are in the table).
pub async fn delete_schedule(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(key): Body<endpoint::DeleteSchedule>,
) -> Reply<endpoint::DeleteSchedule> {
    caller.check_topic(&key.topic, "topic")?;
    scheduler(&state).delete(&key.topic, &key.name).await?;
    Ok(ok(None))
}

/// The handler of [`endpoint::PauseSchedule`] (its summary and answers are in the table).
pub async fn pause_schedule(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(key): Body<endpoint::PauseSchedule>,
) -> Reply<endpoint::PauseSchedule> {
    caller.check_topic(&key.topic, "topic")?;
    scheduler(&state).pause(&key.topic, &key.name).await?;
    let info = scheduler(&state)
        .get(&key.topic, &key.name, DEFAULT_NEXT as usize)
        .await?;
    Ok(ok(view(info)))
}

/// The handler of [`endpoint::ResumeSchedule`] (its summary and answers are in the table).
pub async fn resume_schedule(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(key): Body<endpoint::ResumeSchedule>,
) -> Reply<endpoint::ResumeSchedule> {
    caller.check_topic(&key.topic, "topic")?;
    scheduler(&state).resume(&key.topic, &key.name).await?;
    let info = scheduler(&state)
        .get(&key.topic, &key.name, DEFAULT_NEXT as usize)
        .await?;
    Ok(ok(view(info)))
}
