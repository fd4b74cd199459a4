//! Reads: `/get`, `/tasks`, `/stats`, `/topics`. None of them scans: `/stats` and `/topics`
//! read the storage's counters.

use std::collections::BTreeMap;

use axum::extract::State;
use delayq::State as TaskState;
use serde_json::Value;

use super::{ApiResult, counted};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, Envelope, ErrorData, ok};
use crate::extract::QueryParams;
use crate::metrics::Op;
use crate::model::{
    GetQuery, StatsQuery, StatsView, TaskPage, TaskView, TasksQuery, TopicEntry, TopicList,
    state_names,
};

/// The page size of `/tasks` when none is given (capped by `max_page_size`).
pub const DEFAULT_PAGE_SIZE: u64 = 100;

/// One task, with its state as a code and a name.
#[utoipa::path(
    get,
    path = "/get",
    tag = "inspect",
    params(GetQuery),
    responses(
        (status = 200, description = "The task", body = Envelope<TaskView>),
        (status = 404, description = "No such task", body = Envelope<Option<ErrorData>>),
    ),
    security(("bearer" = []))
)]
pub async fn get_task(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<GetQuery>,
) -> ApiResult<TaskView> {
    caller.check_topic(&q.topic, "topic")?;
    let result = state
        .queue()
        .get(&q.topic, &q.id)
        .await
        .map_err(AppError::from);
    let info = counted(&state, &q.topic, Op::Get, result)?;
    Ok(ok(TaskView::from(info)))
}

/// A page of a topic's tasks (optionally of one state), by due time.
#[utoipa::path(
    get,
    path = "/tasks",
    tag = "inspect",
    params(TasksQuery),
    responses(
        (status = 200, description = "One page of tasks", body = Envelope<TaskPage>),
        (status = 400, description = "A bad state, page or page_size", body = Envelope<Option<ErrorData>>),
    ),
    security(("bearer" = []))
)]
pub async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<TasksQuery>,
) -> ApiResult<TaskPage> {
    caller.check_topic(&q.topic, "topic")?;
    let result = list(&state, &q).await;
    let page = counted(&state, &q.topic, Op::List, result)?;
    Ok(ok(page))
}

async fn list(state: &AppState, q: &TasksQuery) -> Result<TaskPage, AppError> {
    let filter = match q.state.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(TaskState::parse(text).ok_or_else(|| {
            AppError::invalid(
                "state",
                format!("is {text:?}; accepted are {}", state_names()),
            )
        })?),
    };
    let max = state.http().max_page_size;
    let page = q.page.unwrap_or(1);
    let page_size = q.page_size.unwrap_or(DEFAULT_PAGE_SIZE.min(max));
    if page_size == 0 || page_size > max {
        return Err(AppError::invalid(
            "page_size",
            format!("is {page_size}, it must be 1 to {max} (max_page_size)"),
        ));
    }
    let got = state
        .queue()
        .list(&q.topic, filter, page, page_size)
        .await?;
    Ok(TaskPage {
        items: got.items.into_iter().map(TaskView::from).collect(),
        total: got.total,
        page: got.page,
        page_size: got.page_size,
    })
}

/// The counters of one topic, or (without `topic`) of every topic the caller may see, as an
/// object keyed by topic name.
#[utoipa::path(
    get,
    path = "/stats",
    tag = "inspect",
    params(StatsQuery),
    responses(
        (status = 200, description = "With topic: its counters. Without: an object of counters by topic name", body = Envelope<StatsView>),
    ),
    security(("bearer" = []))
)]
pub async fn stats(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<StatsQuery>,
) -> ApiResult<Value> {
    let data = match q.topic {
        Some(topic) => {
            caller.check_topic(&topic, "topic")?;
            let result = state.queue().stats(&topic).await.map_err(AppError::from);
            let stats = counted(&state, &topic, Op::Stats, result)?;
            serde_json::to_value(StatsView::from(stats))
        }
        None => {
            let all: BTreeMap<String, StatsView> = state
                .queue()
                .topics()
                .await?
                .into_iter()
                .filter(|(name, _)| caller.may_use(name))
                .map(|(name, stats)| (name, StatsView::from(stats)))
                .collect();
            serde_json::to_value(all)
        }
    };
    let data = data.map_err(|e| AppError::Internal(format!("encoding the stats: {e}")))?;
    Ok(ok(data))
}

/// Every topic with records (that the caller may see), with its counters.
#[utoipa::path(
    get,
    path = "/topics",
    tag = "inspect",
    responses(
        (status = 200, description = "The topics by name", body = Envelope<TopicList>),
    ),
    security(("bearer" = []))
)]
pub async fn topics(State(state): State<AppState>, caller: Caller) -> ApiResult<TopicList> {
    let topics: Vec<TopicEntry> = state
        .queue()
        .topics()
        .await?
        .into_iter()
        .filter(|(name, _)| caller.may_use(name))
        .map(|(name, stats)| TopicEntry {
            name,
            stats: StatsView::from(stats),
        })
        .collect();
    let total = topics.len() as u64;
    Ok(ok(TopicList { topics, total }))
}
