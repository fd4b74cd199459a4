//! Reads: `/get`, `/tasks`, `/stats`, `/topics`. None of them scans: `/stats` and `/topics`
//! read the storage's counters.

use axum::extract::State;
use delayq_api::{
    AllStats, StatsData, StatsView, TaskPage, TaskView, TasksQuery, TopicEntry, TopicList,
    TopicStatsData,
};

use super::{Query, Reply, counted};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{AppError, ok};
use crate::extract::QueryParams;
use crate::metrics::Op;
use delayq_api::endpoint;

super::handles!(
    endpoint::GetTask => get_task,
    endpoint::ListTasks => list_tasks,
    endpoint::Stats => stats,
    endpoint::Topics => topics,
);

/// The handler of [`endpoint::GetTask`] (its summary and answers are in the table).
pub async fn get_task(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::GetTask>,
) -> Reply<endpoint::GetTask> {
    caller.check_topic(&q.topic, "topic")?;
    let result = state
        .queue()
        .get(&q.topic, &q.id)
        .await
        .map_err(AppError::from);
    let info = counted(&state, &q.topic, Op::Get, result)?;
    Ok(ok(TaskView::from(info)))
}

/// The handler of [`endpoint::ListTasks`] (its summary and answers are in the table).
pub async fn list_tasks(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::ListTasks>,
) -> Reply<endpoint::ListTasks> {
    caller.check_topic(&q.topic, "topic")?;
    let result = list(&state, &q).await;
    let page = counted(&state, &q.topic, Op::List, result)?;
    Ok(ok(page))
}

async fn list(state: &AppState, q: &TasksQuery) -> Result<TaskPage, AppError> {
    let filter = q.state_filter().map_err(delayq::Error::from)?;
    // A page_size over the maximum is clamped, as seqdelay does; the queue enforces the same
    // maximum for every caller of the library.
    let (page, page_size) = q
        .page_and_size(state.limits().max_page_size)
        .map_err(delayq::Error::from)?;
    let got = state
        .queue()
        .list(&q.topic, filter, page, page_size)
        .await?;
    Ok(TaskPage::from(got))
}

/// The handler of [`endpoint::Stats`] (its summary and answers are in the table).
pub async fn stats(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): Query<endpoint::Stats>,
) -> Reply<endpoint::Stats> {
    let data = match q.topic {
        Some(topic) => {
            caller.check_topic(&topic, "topic")?;
            let result = state.queue().stats(&topic).await.map_err(AppError::from);
            let stats = counted(&state, &topic, Op::Stats, result)?;
            let view = with_push(&state, &topic, StatsView::at(stats, now(&state)));
            StatsData::Topic(Box::new(TopicStatsData::new(topic, view)))
        }
        None => {
            let now = now(&state);
            let topics = visible_topics(&state, &caller)
                .await?
                .into_iter()
                .map(|(name, stats)| {
                    let view = with_push(&state, &name, StatsView::at(stats, now));
                    (name, view)
                })
                .collect();
            StatsData::All(AllStats::new(topics))
        }
    };
    Ok(ok(data))
}

/// The handler of [`endpoint::Topics`] (its summary and answers are in the table).
pub async fn topics(State(state): State<AppState>, caller: Caller) -> Reply<endpoint::Topics> {
    let now = now(&state);
    let topics: Vec<TopicEntry> = visible_topics(&state, &caller)
        .await?
        .into_iter()
        .map(|(name, stats)| TopicEntry {
            stats: with_push(&state, &name, StatsView::at(stats, now)),
            name,
        })
        .collect();
    let total = topics.len() as u64;
    Ok(ok(TopicList { topics, total }))
}

/// Adds the push figures of `topic` when it had a push target on this instance.
fn with_push(state: &AppState, topic: &str, mut view: StatsView) -> StatsView {
    view.push = state
        .push()
        .and_then(|p| p.stats(topic))
        .map(|s| s.figures());
    view
}

/// Every topic with records that `caller` may see, with its counters: what `/stats`,
/// `/topics` and the dashboard's overview show.
pub(crate) async fn visible_topics(
    state: &AppState,
    caller: &Caller,
) -> Result<Vec<(String, delayq::TopicStats)>, AppError> {
    let mut topics = state.queue().topics().await?;
    topics.retain(|(name, _)| caller.may_use(name));
    Ok(topics)
}

/// The queue's clock, which says whether a pause with an end still holds.
fn now(state: &AppState) -> u64 {
    state.queue().context().clock.now_ms()
}
