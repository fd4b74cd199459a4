//! The pages: the overview of every topic, a topic, a task, and find by id.
//!
//! Each page handler renders its changing part with one `*_content` function, which the
//! live-update script also asks for (see [`views::respond`]); the forms that a person types
//! into stay outside that part, so a refresh never eats their input. Everything is read
//! through the queue's cheap operations: the counters (`topics`, `stats`), one page of
//! `list`, one `get`, `locate`, and the history the server keeps ([`super::activity`]).

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use delayq::core::validate;
use delayq::core::{FlowLimits, HeldBack};
use delayq::{ScheduleInfo, State as TaskState, TaskInfo, TopicStats};
use delayq_api::push::PushFigures;
use maud::{Markup, html};

use super::activity;
use super::params::{Params, query};
use super::views::{self, Ctx, Flash};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::AppError;

/// Topics per page of the overview: the table stays quick to render and to read at
/// thousands of topics; the filter box finds the rest.
const TOPICS_PER_PAGE: u64 = 50;
/// Tasks per page of a topic.
const TASKS_PER_PAGE: u64 = 50;

/// Whether the live-update script asks for the changing part only.
fn fragment_only(headers: &HeaderMap) -> bool {
    headers.contains_key("x-delayq-fragment")
}

fn flash(params: &Params) -> Option<Flash> {
    params
        .get("error")
        .map(|e| Flash::Error(e.to_owned()))
        .or_else(|| params.get("notice").map(|n| Flash::Notice(n.to_owned())))
}

fn now(state: &AppState) -> u64 {
    state.queue().context().clock.now_ms()
}

/// `GET /`: every topic the caller may see, with counters, charts and (Redis) instances.
pub(super) async fn overview(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let params = Params::parse(q.as_deref().unwrap_or(""));
    let content = overview_content(&state, &caller, &params).await;
    let ctx = Ctx::new(&state, &caller, flash(&params), None);
    views::respond(fragment_only(&headers), content, |live| {
        let body = html! {
            h1 { "Overview" }
            form.inline #topic-filter method="get" action="/" {
                input name="filter" placeholder="filter topics by name" value=[params.get("filter")];
                button.secondary type="submit" { "Filter" }
            }
            (live)
            @if ctx.can_write() { (add_form(None)) }
        };
        views::page("Overview", &ctx, body)
    })
}

async fn overview_content(
    state: &AppState,
    caller: &Caller,
    params: &Params,
) -> Result<Markup, AppError> {
    let now = now(state);
    let all = crate::handlers::inspect::visible_topics(state, caller).await?;
    let filter = params.get("filter");
    let shown: Vec<&(String, TopicStats)> = all
        .iter()
        .filter(|(name, _)| filter.is_none_or(|f| name.contains(f)))
        .collect();
    let pages = (shown.len() as u64).div_ceil(TOPICS_PER_PAGE).max(1);
    let page = params.number("page", 1, 1, pages)?;
    let from = ((page - 1) * TOPICS_PER_PAGE) as usize;
    let rows: Vec<_> = shown
        .iter()
        .skip(from)
        .take(TOPICS_PER_PAGE as usize)
        .copied()
        .collect();
    let sum = all.iter().fold(TopicStats::default(), |mut sum, (_, s)| {
        sum.merge(s);
        sum
    });
    // The charts and the instances sum every topic: only for a caller who may see them all.
    let (charts, instances) = if caller.is_unrestricted() {
        (
            activity::charts(state, None),
            Some(activity::instances(state)),
        )
    } else {
        (None, None)
    };
    Ok(html! {
        @if all.is_empty() {
            (no_topics())
        } @else {
            @if let Some(instances) = instances { (instances) }
            @if let Some(charts) = charts { (charts) }
            h2 { "Topics "
                span.muted { "(" (all.len()) " in all"
                    @if let Some(f) = filter { ", " (shown.len()) " matching " code { (f) } }
                    ")" }
            }
            (topics_table(state, caller, &rows, &sum, now))
            @if pages > 1 {
                (pager(page, pages, |p| {
                    let p = p.to_string();
                    let mut pairs = vec![("page", p.as_str())];
                    pairs.extend(filter.map(|f| ("filter", f)));
                    format!("/?{}", query(&pairs))
                }))
            }
        }
    })
}

/// What the overview shows before the first task is added.
fn no_topics() -> Markup {
    html! {
        div.card.empty #empty {
            h2 { "No topics yet" }
            p { "A topic appears here as soon as a task is added to it (POST /add, "
                code { "delayq add" } ", or the form below)." }
        }
    }
}

/// The overview's table: a row per topic of `rows`, then the sum over every topic.
fn topics_table(
    state: &AppState,
    caller: &Caller,
    rows: &[&(String, TopicStats)],
    sum: &TopicStats,
    now: u64,
) -> Markup {
    html! {
        table #topics {
            thead { tr {
                th { "topic" } th { "state" }
                @for s in TaskState::ALL { th.num { (s.name()) } }
                th.num { "total" } th { "next due" }
                (activity::hour_header())
            } }
            tbody {
                @for (name, stats) in rows.iter().copied() {
                    tr data-topic=(name) {
                        td { a href=(topic_link(name)) { (name) } }
                        td { (pause_badge(stats, now)) }
                        (count_cells(stats))
                        td { @if let Some(due) = stats.next_due_ms { (views::when(due, now)) } @else { span.muted { "—" } } }
                        (activity::hour_cells(state, Some(name)))
                    }
                }
                tr.sum #sum {
                    td { "all topics" } td {}
                    (count_cells(sum))
                    td { @if let Some(due) = sum.next_due_ms { (views::when(due, now)) } }
                    @if caller.is_unrestricted() { (activity::hour_cells(state, None)) }
                }
            }
        }
    }
}

fn count_cells(stats: &TopicStats) -> Markup {
    html! {
        @for s in TaskState::ALL { td.num data-count=(s.name()) { (stats.count(s)) } }
        td.num data-count="total" { (stats.total) }
    }
}

/// Paused or running, as the pause stands at `now` (one whose end has passed is over).
fn pause_badge(stats: &TopicStats, now: u64) -> Markup {
    let pause = stats.pause.at(now);
    html! {
        @if pause.paused {
            span.badge.paused data-paused="true" {
                "paused"
                @if let Some(until) = pause.until_ms { " until " (views::when(until, now)) }
            }
        } @else {
            span.badge data-paused="false" { "running" }
        }
    }
}

fn pager(page: u64, pages: u64, link: impl Fn(u64) -> String) -> Markup {
    html! {
        div.pager {
            @if page > 1 { a #prev href=(link(page - 1)) { "← previous" } }
            span.muted { "page " (page) " of " (pages) }
            @if page < pages { a #next href=(link(page + 1)) { "next →" } }
        }
    }
}

/// `GET /ui/topic?name=&state=&sort=&page=`: one topic.
pub(super) async fn topic(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let params = Params::parse(q.as_deref().unwrap_or(""));
    let name = params.get("name").unwrap_or("").to_owned();
    let content = topic_content(&state, &caller, &params).await;
    let ctx = Ctx::new(&state, &caller, flash(&params), Some(&name));
    let back = topic_link(&name);
    views::respond(fragment_only(&headers), content, |live| {
        let body = html! {
            p.muted { a href="/" { "Overview" } " / topic" }
            h1 { (name) }
            @if ctx.can_write() && !name.is_empty() {
                div.card #topic-actions {
                    form.inline method="post" action="/ui/act" {
                        (hidden("action", "pause")) (hidden("topic", &name)) (hidden("back", &back))
                        label { "pause for (ms, empty: until resumed) " input name="for_ms" size="10" inputmode="numeric"; }
                        button type="submit" data-action="pause" { "Pause" }
                    }
                    (action_button("resume", &name, None, "Resume", &back, "secondary"))
                    (action_button("requeue_all", &name, None, "Requeue all dead", &back, "secondary"))
                }
            }
            (live)
            @if ctx.can_write() && !name.is_empty() { (add_form(Some(&name))) }
        };
        views::page(&name, &ctx, body)
    })
}

async fn topic_content(
    state: &AppState,
    caller: &Caller,
    params: &Params,
) -> Result<Markup, AppError> {
    let name = params.required("name")?;
    caller.check_topic(name, "name")?;
    let now = now(state);
    let stats = state.queue().stats(name).await?;
    let filter = match params.get("state") {
        None => None,
        Some(s) => Some(validate::parse_state("state", s).map_err(delayq::Error::from)?),
    };
    let desc = descending(params)?;
    let total = filter.map_or(stats.total, |s| stats.count(s));
    let pages = total.div_ceil(TASKS_PER_PAGE).max(1);
    let page = params.number("page", 1, 1, pages)?;
    let tasks = page_by_due(state, name, filter, page, total, desc).await?;
    let link = |state_name: Option<&str>, sort: &str, page: u64| {
        let page = page.to_string();
        let mut pairs = vec![("name", name), ("sort", sort), ("page", page.as_str())];
        pairs.extend(state_name.map(|s| ("state", s)));
        format!("/ui/topic?{}", query(&pairs))
    };
    let sort = if desc { "-due" } else { "due" };
    let state_name = filter.map(TaskState::name);
    let timeline = activity::timeline(state, name, now).await?;
    let more = extensions(state, name, &stats, now).await?;
    Ok(html! {
        (counts_card(name, &stats, now))
        (timeline)
        @if let Some(charts) = activity::charts(state, Some(name)) { (charts) }
        @if let Some(more) = more { (more) }
        h2 { "Tasks" }
        div.tabs #state-tabs {
            a class=[filter.is_none().then_some("on")] href=(link(None, sort, 1)) { "all (" (stats.total) ")" }
            @for s in TaskState::ALL {
                a class=[(filter == Some(s)).then_some("on")] href=(link(Some(s.name()), sort, 1)) {
                    (s.name()) " (" (stats.count(s)) ")"
                }
            }
        }
        @if tasks.is_empty() {
            div.card.empty { "No tasks" @if let Some(s) = state_name { " in state " (s) } "." }
        } @else {
            (tasks_table(&tasks, now, desc, &link(state_name, if desc { "due" } else { "-due" }, 1)))
            (pager(page, pages, |p| link(state_name, sort, p)))
        }
    })
}

/// Whether the `sort` parameter asks for the latest due first (`-due`; `due`, the default,
/// is earliest first).
fn descending(params: &Params) -> Result<bool, AppError> {
    match params.get("sort") {
        None | Some("due") => Ok(false),
        Some("-due") => Ok(true),
        Some(other) => Err(AppError::invalid(
            "sort",
            format!("is {other:?}; expected due or -due"),
        )),
    }
}

/// A topic's pause, next due and counters.
fn counts_card(name: &str, stats: &TopicStats, now: u64) -> Markup {
    html! {
        div.card {
            (pause_badge(stats, now))
            " next due: "
            @if let Some(due) = stats.next_due_ms { (views::when(due, now)) } @else { span.muted { "none" } }
            table #counts {
                thead { tr { @for s in TaskState::ALL { th.num { (s.name()) } } th.num { "total" } } }
                tbody { tr data-topic=(name) { (count_cells(stats)) } }
            }
        }
    }
}

/// One page of tasks; the due column's head links to `resort`, the other order.
fn tasks_table(tasks: &[TaskInfo], now: u64, desc: bool, resort: &str) -> Markup {
    html! {
        table #tasks {
            thead { tr {
                th { "id" } th { "state" } th.num { "priority" }
                th { a #sort-due href=(resort) {
                    "due " @if desc { "↓" } @else { "↑" } } }
                th.num { "retries" } th { "last error" }
            } }
            tbody {
                @for t in tasks {
                    tr data-id=(t.id) {
                        td { a href=(task_link(&t.topic, &t.id)) { (t.id) } }
                        td { (views::state_badge(t.state)) }
                        td.num { (t.priority) }
                        td { (views::when(t.due_ms, now)) }
                        td.num { (t.retries) }
                        td { @if let Some(e) = &t.last_error { (clip(e, 80)) } }
                    }
                }
            }
        }
    }
}

/// One page of a topic's tasks by due time, earliest first or (`desc`) latest first. The
/// queue lists earliest first only, so a descending page is the matching slice from the
/// end: at most two ascending pages, reversed.
async fn page_by_due(
    state: &AppState,
    topic: &str,
    filter: Option<TaskState>,
    page: u64,
    total: u64,
    desc: bool,
) -> Result<Vec<TaskInfo>, AppError> {
    let size = TASKS_PER_PAGE;
    if !desc {
        return Ok(state.queue().list(topic, filter, page, size).await?.items);
    }
    let (start, end) = desc_range(total, page, size);
    if start >= end {
        return Ok(Vec::new());
    }
    let mut items = Vec::new();
    for p in (start / size + 1)..=((end - 1) / size + 1) {
        let got = state.queue().list(topic, filter, p, size).await?;
        let base = (p - 1) * size;
        items.extend(
            got.items
                .into_iter()
                .enumerate()
                .filter(|(i, _)| (start..end).contains(&(base + *i as u64)))
                .map(|(_, t)| t),
        );
    }
    items.reverse();
    Ok(items)
}

/// The ascending positions `start..end` that page `page` (from 1) of a descending listing
/// of `total` items shows.
fn desc_range(total: u64, page: u64, size: u64) -> (u64, u64) {
    let end = total.saturating_sub((page - 1) * size);
    (end.saturating_sub(size), end)
}

/// The flow limits, the push target and the schedules of a topic (docs/design.md §11, §8,
/// §9): a section each, rendered only when the topic has one (or, for the limits, when some
/// ready tasks are held back). The target's figures are this instance's; the limits and the
/// schedules come from the shared storage, the schedules with their next occurrences.
async fn extensions(
    state: &AppState,
    topic: &str,
    stats: &TopicStats,
    now: u64,
) -> Result<Option<Markup>, AppError> {
    let limits = state.queue().topic_limits(topic).await?;
    let target = match state.push() {
        Some(push) => push.get(topic).await?,
        None => None,
    };
    let figures = state
        .push()
        .and_then(|p| p.stats(topic))
        .map(|s| s.figures());
    let schedules = state.scheduler().list(Some(topic), UPCOMING_SHOWN).await?;
    let held = stats.held_back;
    if limits.is_none() && held.is_none() && target.is_none() && schedules.is_empty() {
        return Ok(None);
    }
    Ok(Some(html! {
        @if limits.is_some() || !held.is_none() { (limits_section(limits.as_ref(), &held)) }
        @if let Some(t) = &target { (push_section(t, figures.as_ref())) }
        @if !schedules.is_empty() { (schedules_section(&schedules, now)) }
    }))
}

/// The topic's flow limits and how many ready tasks each kind holds back now.
fn limits_section(limits: Option<&FlowLimits>, held: &HeldBack) -> Markup {
    let unlimited = html! { span.muted { "none" } };
    html! {
        h2 { "Flow limits" }
        div.card #flow-limits {
            table {
                thead { tr { th { "limit" } th { "value" } th.num { "ready tasks it holds back" } } }
                tbody {
                    tr data-limit="max_active" {
                        th { "max active" }
                        td { @match limits.and_then(|l| l.max_active) { Some(n) => (n), None => (unlimited) } }
                        td.num { (held.max_active) }
                    }
                    tr data-limit="rate" {
                        th { "rate" }
                        td { @match limits.and_then(|l| l.rate_per_s.zip(l.effective_burst())) {
                            Some((r, b)) => { (r) " /s, burst " (b) }
                            None => (unlimited),
                        } }
                        td.num { (held.rate) }
                    }
                    tr data-limit="max_active_per_key" {
                        th { "max active per key" }
                        td { @match limits.and_then(|l| l.max_active_per_key) { Some(n) => (n), None => (unlimited) } }
                        td.num { (held.key) }
                    }
                }
            }
            @if limits.is_none() { p.muted { "No limits are set now; the counts are from before they were removed." } }
        }
    }
}

/// The topic's push target, and this instance's figures of it.
fn push_section(t: &delayq_api::push::PushTarget, figures: Option<&PushFigures>) -> Markup {
    html! {
        h2 { "Push target" }
        div.card #push-target {
            table {
                tbody {
                    tr { th { "url" } td { code { (t.url) } } }
                    tr { th { "signed" } td { @if t.secret.is_some() { "yes (Delayq-Signature)" } @else { "no" } } }
                    tr { th { "concurrency" } td { (t.concurrency) } }
                    tr { th { "rate" } td {
                        @if let Some(r) = t.rate_per_s { (r) " /s" @if let Some(b) = t.burst { ", burst " (b) } }
                        @else { span.muted { "unlimited" } }
                    } }
                    tr { th { "timeout" } td {
                        @if let Some(ms) = t.timeout_ms { (ms) " ms" } @else { span.muted { "the task's ttr" } }
                    } }
                }
            }
            @if let Some(f) = figures {
                table #push-figures {
                    thead { tr {
                        th.num { "delivered" } th.num { "failed: status" } th.num { "timeout" }
                        th.num { "connect" } th.num { "in flight" } th.num { "latency avg" }
                        th.num { "p99" }
                    } }
                    tbody { tr {
                        td.num { (f.delivered) } td.num { (f.failed_status) }
                        td.num { (f.failed_timeout) } td.num { (f.failed_connect) }
                        td.num { (f.in_flight) } td.num { (f.latency_avg_ms) " ms" }
                        td.num { (f.latency_p99_ms) " ms" }
                    } }
                }
                p.muted { "Calls made by this instance since it started." }
            }
        }

    }
}

/// The topic's schedules with their next occurrences.
fn schedules_section(schedules: &[ScheduleInfo], now: u64) -> Markup {
    html! {
        h2 { "Schedules" }
        table #schedules {
            thead { tr {
                th { "name" } th { "when" } th { "state" } th { "last added" } th { "next occurrences" }
            } }
            tbody {
                @for info in schedules {
                    tr data-schedule=(info.def.name) {
                        td { (info.def.name) }
                        td {
                            @if let Some(cron) = &info.def.cron {
                                code { (cron) } " " (info.def.timezone.as_deref().unwrap_or("UTC"))
                            } @else if let Some(every) = info.def.every_ms {
                                "every " (views::duration(every))
                            }
                        }
                        td { @if info.def.paused { span.badge.paused { "paused" } } @else { "active" } }
                        td { @if let Some(c) = info.cursor_ms { (views::when(c, now)) } @else { span.muted { "none" } } }
                        td {
                            @for (i, due) in info.upcoming_ms.iter().enumerate() {
                                @if i > 0 { ", " }
                                (views::when(*due, now))
                            }
                            @if info.upcoming_ms.is_empty() { span.muted { "none" } }
                        }
                    }
                }
            }
        }

    }
}

/// How many next occurrences of each schedule the topic page lists.
const UPCOMING_SHOWN: usize = 3;

fn topic_link(name: &str) -> String {
    format!("/ui/topic?{}", query(&[("name", name)]))
}

fn task_link(topic: &str, id: &str) -> String {
    format!("/ui/task?{}", query(&[("topic", topic), ("id", id)]))
}

fn clip(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_owned(),
    }
}

/// `GET /ui/task?topic=&id=`: the whole record of one task, and what can be done with it.
pub(super) async fn task(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Response {
    let params = Params::parse(q.as_deref().unwrap_or(""));
    let topic = params.get("topic").unwrap_or("").to_owned();
    let id = params.get("id").unwrap_or("").to_owned();
    let ctx = Ctx::new(&state, &caller, flash(&params), Some(&topic));
    let content = task_content(&state, &ctx, &params).await;
    views::respond(fragment_only(&headers), content, |live| {
        let body = html! {
            p.muted {
                a href="/" { "Overview" } " / "
                a href=(topic_link(&topic)) { (topic) }
                " / task"
            }
            h1 #task-id { (id) }
            (live)
        };
        views::page(&id, &ctx, body)
    })
}

async fn task_content(
    state: &AppState,
    ctx: &Ctx<'_>,
    params: &Params,
) -> Result<Markup, AppError> {
    let topic = params.required("topic")?;
    let id = params.required("id")?;
    ctx.caller.check_topic(topic, "topic")?;
    let t = state.queue().get(topic, id).await?;
    let now = now(state);
    let back = task_link(topic, id);
    let topic_page = topic_link(topic);
    Ok(html! {
        div.grid {
            div.card {
                dl.record #record {
                    dt { "topic" } dd data-field="topic" { (t.topic) }
                    dt { "id" } dd data-field="id" { (t.id) }
                    dt { "state" } dd data-field="state" { (views::state_badge(t.state)) }
                    dt { "due" } dd data-field="due_ms" { (views::when(t.due_ms, now)) " " span.muted { "(" (t.due_ms) ")" } }
                    dt { "priority" } dd data-field="priority" { (t.priority) }
                    dt { "retries" } dd data-field="retries" { (t.retries) " of " @if t.max_retries < 0 { "no limit" } @else { (t.max_retries) } }
                    dt { "ttr" } dd { (views::duration(t.ttr_ms)) }
                    dt { "added" } dd { (views::when(t.created_at_ms, now)) }
                    dt { "last change" } dd { (views::when(t.updated_at_ms, now)) }
                    @if let Some(d) = t.deadline_ms {
                        dt { @if t.state == TaskState::Active { "ttr deadline" } @else { "removed" } }
                        dd { (views::when(d, now)) }
                    }
                    @if let Some(b) = &t.backoff { dt { "backoff" } dd { code { (format!("{b:?}")) } } }
                    @if let Some(e) = &t.last_error { dt { "last error" } dd #last-error { (e) } }
                }
            }
            @if ctx.can_write() {
                div.card #task-actions {
                    h2 { "Actions" }
                    (task_actions(&t, &back, &topic_page))
                }
            }
        }
        h2 { "Body " span.muted { "(" (t.body.len()) " bytes, " (body_kind(&t.body)) ")" } }
        @if t.body.is_empty() { p.muted #body-empty { "(empty body)" } } @else { pre.body #body { (body_text(&t.body)) } }
        h2 { "Attempts" }
        @if t.history.is_empty() {
            p.muted #no-attempts { "No failed attempts." }
        } @else {
            table #attempts {
                thead { tr { th { "started" } th { "ended" } th { "outcome" } th { "error" } } }
                tbody {
                    @for a in &t.history {
                        tr {
                            td { (views::when(a.started_at_ms, now)) }
                            td { (views::when(a.ended_at_ms, now)) }
                            td { (a.outcome) }
                            td { @if let Some(e) = &a.error { (e) } }
                        }
                    }
                }
            }
        }
    })
}

/// The buttons that apply to a task in its state (the server refuses the others anyway).
fn task_actions(t: &TaskInfo, back: &str, topic_page: &str) -> Markup {
    let waiting = matches!(t.state, TaskState::Delayed | TaskState::Ready);
    let cancellable = waiting || t.state == TaskState::Active;
    let (topic, id) = (t.topic.as_str(), Some(t.id.as_str()));
    html! {
        @if waiting {
            (action_button("run_now", topic, id, "Run now", back, ""))
            form.inline method="post" action="/ui/act" {
                (hidden("action", "reschedule")) (hidden("topic", topic)) (hidden("id", &t.id)) (hidden("back", back))
                label { "delay (ms) " input name="delay_ms" size="10" inputmode="numeric" required; }
                button type="submit" data-action="reschedule" { "Reschedule" }
            }
        }
        @if cancellable { (action_button("cancel", topic, id, "Cancel", back, "danger")) }
        @if t.state == TaskState::Active { (action_button("bury", topic, id, "Bury", back, "secondary")) }
        @if t.state == TaskState::Dead { (action_button("requeue", topic, id, "Requeue", back, "")) }
        form.inline method="post" action="/ui/act" data-confirm="Delete this task's record for good?" {
            (hidden("action", "delete")) (hidden("topic", topic)) (hidden("id", &t.id)) (hidden("back", topic_page))
            button.danger type="submit" data-action="delete" { "Delete" }
        }
    }
}

fn hidden(name: &str, value: &str) -> Markup {
    html! { input type="hidden" name=(name) value=(value); }
}

/// A form of one button that posts `action` for a topic (and a task).
fn action_button(
    action: &str,
    topic: &str,
    id: Option<&str>,
    label: &str,
    back: &str,
    class: &str,
) -> Markup {
    html! {
        form.inline method="post" action="/ui/act" {
            (hidden("action", action)) (hidden("topic", topic))
            @if let Some(id) = id { (hidden("id", id)) }
            (hidden("back", back))
            button class=(class) type="submit" data-action=(action) { (label) }
        }
    }
}

/// The form that adds a task, for a given topic or any.
fn add_form(topic: Option<&str>) -> Markup {
    html! {
        div.card #add-task {
            h2 { "Add a task" }
            form method="post" action="/ui/act" {
                (hidden("action", "add"))
                @if let Some(t) = topic { (hidden("topic", t)) } @else {
                    input name="topic" placeholder="topic" required;
                    " "
                }
                input name="id" placeholder="id" required;
                " "
                input name="delay_ms" placeholder="delay (ms)" inputmode="numeric" size="10";
                " "
                input name="priority" placeholder="priority (1024)" inputmode="numeric" size="10";
                textarea name="body" placeholder="body (text or JSON)" {}
                button type="submit" data-action="add" { "Add" }
            }
        }
    }
}

/// What the body is, as shown beside it.
fn body_kind(body: &[u8]) -> &'static str {
    match std::str::from_utf8(body) {
        Ok(text) if serde_json::from_str::<serde_json::Value>(text).is_ok() => "JSON",
        Ok(_) => "text",
        Err(_) => "binary, shown as base64",
    }
}

/// The body as shown: JSON pretty-printed when it parses, text as it is, else base64.
fn body_text(body: &[u8]) -> String {
    use base64::Engine as _;
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .filter(|v| v.is_object() || v.is_array())
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| text.to_owned()),
        Err(_) => base64::engine::general_purpose::STANDARD.encode(body),
    }
}

/// `GET /ui/find?id=&topic=`: exact (topic, id), or the id across every topic.
pub(super) async fn find(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(q): RawQuery,
) -> Response {
    let params = Params::parse(q.as_deref().unwrap_or(""));
    let ctx = Ctx::new(&state, &caller, None, params.get("topic"));
    match find_topics(&state, &caller, &params).await {
        Ok(topics) if topics.len() == 1 => {
            let id = params.get("id").unwrap_or("");
            Redirect::to(&task_link(&topics[0], id)).into_response()
        }
        Ok(topics) => {
            let id = params.get("id").unwrap_or("");
            let status = if topics.is_empty() {
                axum::http::StatusCode::NOT_FOUND
            } else {
                axum::http::StatusCode::OK
            };
            let body = html! {
                h1 { "Find " code { (id) } }
                @if topics.is_empty() {
                    div.banner.error #not-found role="alert" {
                        "No task with id " code { (id) }
                        @if let Some(t) = params.get("topic") { " in topic " code { (t) } } @else { " in any topic you may see" }
                        "."
                    }
                } @else {
                    p { "The id is used in " (topics.len()) " topics:" }
                    ul #found { @for t in &topics { li { a href=(task_link(t, id)) { (t) } } } }
                }
            };
            (
                status,
                axum::response::Html(views::page("Find", &ctx, body).into_string()),
            )
                .into_response()
        }
        Err(err) => views::error_page(&state, Some(&caller), &err),
    }
}

/// The topics (the caller may see) that hold a task with the id asked for.
async fn find_topics(
    state: &AppState,
    caller: &Caller,
    params: &Params,
) -> Result<Vec<String>, AppError> {
    let id = params.required("id")?.trim();
    if let Some(topic) = params.get("topic").map(str::trim).filter(|t| !t.is_empty()) {
        caller.check_topic(topic, "topic")?;
        return match state.queue().get(topic, id).await {
            Ok(_) => Ok(vec![topic.to_owned()]),
            Err(delayq::Error::NotFound { .. }) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        };
    }
    let mut topics = state.queue().locate(id).await?;
    topics.retain(|t| caller.may_use(t));
    Ok(topics)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descending_pages_are_slices_from_the_end() {
        // (total, page, size) -> ascending positions shown
        for (total, page, size, want) in [
            (120, 1, 50, (70, 120)),
            (120, 2, 50, (20, 70)),
            (120, 3, 50, (0, 20)),
            (0, 1, 50, (0, 0)),
            (50, 1, 50, (0, 50)),
        ] {
            assert_eq!(desc_range(total, page, size), want, "{total} {page}");
        }
    }

    #[test]
    fn bodies_show_as_json_text_or_base64() {
        assert_eq!(body_text(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(body_kind(br#"{"a":1}"#), "JSON");
        assert_eq!(body_text(b"<script>x</script>"), "<script>x</script>");
        assert_eq!(body_text(&[0xff, 0x00]), "/wA=");
        assert_eq!(body_kind(&[0xff]), "binary, shown as base64");
    }
}
