//! What the dashboard shows of the queue's activity over time: throughput and lateness
//! charts over the last hour and the instances of a Redis deployment (both from the server's
//! history ring, [`crate::history`]), and the due-time timeline ahead of a topic (from the
//! storage's range counts, [`delayq::Queue::due_counts`], not a scan of the tasks where the
//! backend can avoid one). This module only turns those numbers into charts and tables.

use maud::{Markup, html};

use super::charts::{self, Line, colors};
use super::views;
use crate::app::AppState;
use crate::error::AppError;
use crate::history::{InstanceView, LOCAL_INSTANCE, Series};

/// The step of the all-topics charts: an hour in 360 points.
const OVERVIEW_STEP_MS: u64 = 10_000;

/// The throughput and lateness charts of one topic, or of all (`None`): the whole ring, an
/// hour, at 10 s steps for all topics and at the topic ring's own minute for one.
pub(super) fn charts(state: &AppState, topic: Option<&str>) -> Option<Markup> {
    let history = state.history();
    let series = match topic {
        None => history.series_with_step(None, OVERVIEW_STEP_MS),
        Some(t) => history.series(Some(t)),
    };
    let whom = topic.map_or_else(|| "all topics".to_owned(), |t| format!("topic {t}"));
    Some(html! {
        h2 { "Activity, last hour" }
        @if series.end_ms == 0 {
            p.muted #charts-pending { "Throughput and lateness charts appear once the server has sampled its first seconds." }
        } @else {
            div.grid #charts {
                div.card.chart #throughput { (views::svg(throughput(&series, &whom))) }
                div.card.chart #lateness { (views::svg(lateness(&series, &whom))) }
            }
        }
    })
}

fn span_s(series: &Series) -> f64 {
    (series.added.len() as u64 * series.step_ms) as f64 / 1000.0
}

fn throughput(series: &Series, whom: &str) -> String {
    let lines = [
        ("added", colors::ADDED, &series.added),
        ("fired", colors::FIRED, &series.fired),
        ("finished", colors::FINISHED, &series.finished),
        ("failed", colors::FAILED, &series.failed),
    ]
    .map(|(name, color, values)| Line {
        name,
        color,
        values: values.clone(),
    });
    charts::lines(
        &format!("Throughput, {whom}, last hour"),
        "tasks/s",
        span_s(series),
        &lines,
    )
}

fn lateness(series: &Series, whom: &str) -> String {
    // Where nothing fired there is no lateness; drawn as 0.
    let ms = |v: &Vec<Option<u64>>| v.iter().map(|x| x.unwrap_or(0) as f64).collect();
    let lines = [
        Line {
            name: "p50",
            color: colors::P50,
            values: ms(&series.lateness_p50_ms),
        },
        Line {
            name: "p99",
            color: colors::P99,
            values: ms(&series.lateness_p99_ms),
        },
    ];
    charts::lines(
        &format!("Fire lateness, {whom}, last hour"),
        "ms late",
        span_s(series),
        &lines,
    )
}

/// The instances of a Redis deployment with their activity and its sum; nothing when the
/// storage is this process's own (there is one instance, and the overview is its numbers).
pub(super) fn instances(state: &AppState) -> Markup {
    let all = state.history().instances();
    if all.iter().all(|i| i.id == LOCAL_INSTANCE) {
        return html! {};
    }
    let now = state.queue().context().clock.now_ms();
    let sum = |f: fn(&InstanceView) -> f64| all.iter().map(f).sum::<f64>();
    html! {
        h2 { "Instances " span.muted { "(" (all.len()) ")" } }
        table #instances {
            thead { tr {
                th { "instance" } th { "status" } th { "started" }
                th.num { "added" } th.num { "fired" } th.num { "finished" } th.num { "failed" }
                th.num { "added/s" } th.num { "fired/s" } th.num { "finished/s" } th.num { "failed/s" }
            } }
            tbody {
                @for i in &all {
                    tr data-instance=(i.id) {
                        td { (i.id) @if i.this { " " span.badge { "this one" } } }
                        td { @if i.alive { span.badge.s-ready { "alive" } } @else { span.badge.s-dead { "gone" } }
                             " " span.muted { "seen " (views::when(i.last_seen_ms, now)) } }
                        td { (views::when(i.started_ms, now)) }
                        td.num { (i.totals.added) } td.num { (i.totals.fired) }
                        td.num { (i.totals.finished) } td.num { (i.totals.failed) }
                        td.num { (rate(i.rates.added)) } td.num { (rate(i.rates.fired)) }
                        td.num { (rate(i.rates.finished)) } td.num { (rate(i.rates.failed)) }
                    }
                }
                tr.sum #instances-sum {
                    td { "all instances" } td {} td {}
                    td.num { (all.iter().map(|i| i.totals.added).sum::<u64>()) }
                    td.num { (all.iter().map(|i| i.totals.fired).sum::<u64>()) }
                    td.num { (all.iter().map(|i| i.totals.finished).sum::<u64>()) }
                    td.num { (all.iter().map(|i| i.totals.failed).sum::<u64>()) }
                    td.num { (rate(sum(|i| i.rates.added))) } td.num { (rate(sum(|i| i.rates.fired))) }
                    td.num { (rate(sum(|i| i.rates.finished))) } td.num { (rate(sum(|i| i.rates.failed))) }
                }
            }
        }
    }
}

fn rate(per_s: f64) -> String {
    format!("{per_s:.1}")
}

/// The header cells of [`hour_cells`].
pub(super) fn hour_header() -> Markup {
    html! {
        th.num title="per second over the last hour" { "added/s" }
        th.num title="per second over the last hour" { "fired/s" }
        th.num title="per second over the last hour" { "finished/s" }
        th.num title="per second over the last hour" { "failed/s" }
        th.num title="the worst fire lateness p99 of a minute (a second for all topics) in the last hour" { "worst p99 late" }
    }
}

/// A topic's (or all topics', `None`) rates over the last hour and its worst fire lateness
/// p99 of a ring bucket, as table cells.
pub(super) fn hour_cells(state: &AppState, topic: Option<&str>) -> Markup {
    let hour = state.history().series(topic);
    let worst = hour.lateness_p99_ms.iter().copied().flatten().max();
    html! {
        td.num data-rate="added" { (per_s(mean_rate(&hour, &hour.added))) }
        td.num data-rate="fired" { (per_s(mean_rate(&hour, &hour.fired))) }
        td.num data-rate="finished" { (per_s(mean_rate(&hour, &hour.finished))) }
        td.num data-rate="failed" { (per_s(mean_rate(&hour, &hour.failed))) }
        td.num { @if let Some(ms) = worst { "≤" (ms) " ms" } @else { span.muted { "—" } } }
    }
}

/// The rate over the whole series: each bucket's rate weighted by the time it covers (the
/// newest bucket is only partly covered).
fn mean_rate(series: &Series, values: &[f64]) -> f64 {
    let (mut events, mut ms) = (0.0, 0u64);
    for (i, v) in values.iter().enumerate() {
        let start = series.start_ms + i as u64 * series.step_ms;
        let covered = series.end_ms.saturating_sub(start).min(series.step_ms);
        events += v * covered as f64;
        ms += covered;
    }
    if ms == 0 { 0.0 } else { events / ms as f64 }
}

/// A rate shortly: `0`, `0.03`, `1.2`, `350`.
fn per_s(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v < 0.01 {
        "<0.01".into()
    } else if v < 1.0 {
        format!("{v:.2}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// The buckets of one timeline: how many, how long, and how each is labelled.
struct Span {
    title: &'static str,
    buckets: u64,
    step_ms: u64,
    unit: &'static str,
    unit_ms: u64,
}

const SPANS: [Span; 3] = [
    Span {
        title: "Due in the next hour (5 min buckets)",
        buckets: 12,
        step_ms: 300_000,
        unit: "m",
        unit_ms: 60_000,
    },
    Span {
        title: "Due in the next day (1 h buckets)",
        buckets: 24,
        step_ms: 3_600_000,
        unit: "h",
        unit_ms: 3_600_000,
    },
    Span {
        title: "Due in the next week (1 day buckets)",
        buckets: 7,
        step_ms: 86_400_000,
        unit: "d",
        unit_ms: 86_400_000,
    },
];

/// The due-time timeline of a topic: its DELAYED tasks counted per bucket over the next
/// hour, day and week (three range counts).
pub(super) async fn timeline(state: &AppState, topic: &str, now: u64) -> Result<Markup, AppError> {
    let mut drawn = Vec::with_capacity(SPANS.len());
    for span in &SPANS {
        let bounds: Vec<u64> = (0..=span.buckets).map(|i| now + i * span.step_ms).collect();
        let counts = state.queue().due_counts(topic, &bounds).await?;
        let labels: Vec<String> = (0..span.buckets)
            .map(|i| format!("{}{}", i * span.step_ms / span.unit_ms, span.unit))
            .collect();
        drawn.push(charts::bars(span.title, &labels, &counts));
    }
    Ok(html! {
        h2 { "Timeline ahead" }
        div.grid #timeline {
            @for svg in drawn { div.card.chart { (views::svg(svg)) } }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hour_rate_weighs_the_partial_bucket_by_what_it_covers() {
        let mut series = crate::history::History::new().series(Some("none"));
        series.start_ms = 0;
        series.step_ms = 60_000;
        // Two full minutes at 1/s and 2/s, then 30 s at 4/s: 60 + 120 + 120 events in 150 s.
        series.end_ms = 150_000;
        let rate = mean_rate(&series, &[1.0, 2.0, 4.0]);
        assert!((rate - 2.0).abs() < 1e-9, "{rate}");
        series.end_ms = 0;
        assert_eq!(mean_rate(&series, &[1.0]), 0.0);
        assert_eq!(per_s(0.0), "0");
        assert_eq!(per_s(0.034), "0.03");
        assert_eq!(per_s(0.001), "<0.01");
        assert_eq!(per_s(350.2), "350");
    }
}
