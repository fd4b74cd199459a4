//! What the dashboard shows of the queue's activity over time: throughput and lateness
//! charts over the last hour, the instances of a Redis deployment, and the due-time
//! timeline ahead of a topic. The numbers come from the server's history ring and the
//! storage's range counts; this module only turns them into charts.

use maud::{Markup, html};

use crate::app::AppState;
use crate::error::AppError;

/// The throughput and lateness charts of one topic, or of all (`None`).
pub(super) fn charts(_state: &AppState, _topic: Option<&str>) -> Option<Markup> {
    None
}

/// The instances of a Redis deployment and their sum; nothing in embedded mode.
pub(super) fn instances(_state: &AppState) -> Markup {
    html! {}
}

/// The due-time timeline of a topic: next hour, day and week.
pub(super) async fn timeline(
    _state: &AppState,
    _topic: &str,
    _now: u64,
) -> Result<Markup, AppError> {
    Ok(html! {})
}
