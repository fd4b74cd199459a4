//! Output for people: tables of tasks, deliveries and counters.
//!
//! Each function renders to a `String` so that it can be tested without a terminal. States are
//! written by name, instants as RFC 3339 in UTC with how far away they are (`in 15m`),
//! durations with units, and bodies cut to a readable length. `--json` output does not come
//! through here: it is the server's `data`, printed as is.

use comfy_table::{Cell, ContentArrangement, Table, presets};
use delayq_client::{
    BodyEncoding, PauseData, ScheduleView, StatsView, TaskDelivery, TaskPage, TaskView,
};

use crate::duration::{format_duration, format_instant, format_relative};

/// How much of a body a table shows.
const BODY_WIDTH: usize = 40;

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().map(|h| Cell::new(*h)));
    table
}

/// Flow limits as a table, one topic a row.
pub fn limits(limits: &[delayq_client::LimitsView]) -> String {
    if limits.is_empty() {
        return "no flow limits".into();
    }
    let mut t = table(&["topic", "max active", "rate", "max active per key"]);
    let or_dash = |n: Option<u32>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    for l in limits {
        let rate = match (l.rate_per_s, l.burst) {
            (Some(r), Some(b)) => format!("{r}/s (burst {b})"),
            (Some(r), None) => format!("{r}/s"),
            _ => "-".into(),
        };
        t.add_row(vec![
            l.topic.clone(),
            or_dash(l.max_active),
            rate,
            or_dash(l.max_active_per_key),
        ]);
    }
    t.to_string()
}

/// Push targets as a table (never their secret: the server does not send it).
pub fn push_targets(targets: &[delayq_client::TargetView]) -> String {
    if targets.is_empty() {
        return "no push target".into();
    }
    let mut t = table(&[
        "topic",
        "url",
        "concurrency",
        "rate",
        "timeout",
        "headers",
        "signed",
    ]);
    for target in targets {
        let rate = match (target.rate_per_s, target.burst) {
            (Some(r), Some(b)) => format!("{r}/s (burst {b})"),
            (Some(r), None) => format!("{r}/s"),
            _ => "-".into(),
        };
        let headers: Vec<String> = target
            .headers
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        t.add_row(vec![
            target.topic.clone(),
            target.url.clone(),
            target.concurrency.to_string(),
            rate,
            target
                .timeout_ms
                .map_or_else(|| "ttr".to_owned(), format_duration),
            headers.join("\n"),
            if target.has_secret { "yes" } else { "no" }.to_owned(),
        ]);
    }
    t.to_string()
}

/// An instant with its distance from now: `2030-01-01T08:00:00.000Z (in 15m)`.
pub fn when(at_ms: u64, now_ms: u64) -> String {
    format!(
        "{} ({})",
        format_instant(at_ms),
        format_relative(at_ms, now_ms)
    )
}

/// A body cut to `BODY_WIDTH` characters, on one line.
pub fn short_body(body: &str) -> String {
    let one_line: String = body
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= BODY_WIDTH {
        return one_line;
    }
    let mut cut: String = one_line.chars().take(BODY_WIDTH - 1).collect();
    cut.push('…');
    cut
}

/// A body for people: text as it is; a base64 body decoded and its bytes written with escapes
/// (`\xff`), marked as binary with its length.
pub fn body_words(body: &str, encoding: BodyEncoding) -> String {
    match encoding {
        BodyEncoding::Base64 => {
            match delayq_client::decode_body(body.to_owned(), Some(encoding), "body") {
                Ok(bytes) => format!("{} (binary, {} bytes)", bytes.escape_ascii(), bytes.len()),
                Err(_) => format!("{body} (base64 that does not decode)"),
            }
        }
        _ => body.to_owned(),
    }
}

/// A topic's pause in words: `paused until ... (in 5m)`, `paused until resumed`, `not paused`.
pub fn pause_words(pause: &PauseData, now_ms: u64) -> String {
    match (pause.paused, pause.paused_until_ms) {
        (false, _) => "is not paused".into(),
        (true, None) => "is paused until resumed".into(),
        (true, Some(until)) => format!("is paused until {}", when(until, now_ms)),
    }
}

/// The pause column of a stats row.
fn pause_cell(s: &StatsView, now_ms: u64) -> String {
    match (s.paused, s.paused_until_ms) {
        (false, _) => "-".into(),
        (true, None) => "until resumed".into(),
        (true, Some(until)) => format!("until {}", when(until, now_ms)),
    }
}

/// `max_retries` in words: `3`, `none (1 attempt)`, `unlimited`.
fn retries_limit(max: i64) -> String {
    match max {
        -1 => "unlimited".into(),
        0 => "0 (one attempt)".into(),
        n => n.to_string(),
    }
}

/// One task, field by field.
pub fn task(task: &TaskView, now_ms: u64) -> String {
    let mut t = table(&["field", "value"]);
    t.add_row(vec!["topic".to_owned(), task.topic.clone()]);
    t.add_row(vec!["id".to_owned(), task.id.clone()]);
    t.add_row(vec!["state".to_owned(), task.state.name().to_owned()]);
    t.add_row(vec!["priority".to_owned(), task.priority.to_string()]);
    t.add_row(vec!["due".to_owned(), when(task.due_ms, now_ms)]);
    t.add_row(vec!["delay".to_owned(), format_duration(task.delay_ms)]);
    t.add_row(vec!["ttr".to_owned(), format_duration(task.ttr_ms)]);
    t.add_row(vec![
        "retries".to_owned(),
        format!("{} of {}", task.retries, retries_limit(task.max_retries)),
    ]);
    if let Some(backoff) = &task.backoff {
        t.add_row(vec!["backoff".to_owned(), backoff_words(backoff)]);
    }
    if let Some(deadline) = task.deadline_ms {
        let label = if task.state.is_terminal() {
            "removed"
        } else {
            "deadline"
        };
        t.add_row(vec![label.to_owned(), when(deadline, now_ms)]);
    }
    if let Some(at) = task.expires_at_ms {
        let policy = match task.on_expire {
            Some(delayq::OnExpire::Drop) => " (then deleted)",
            Some(delayq::OnExpire::Dead) | None => " (then dead)",
        };
        t.add_row(vec![
            "expires".to_owned(),
            format!("{}{policy}", when(at, now_ms)),
        ]);
    }
    t.add_row(vec!["created".to_owned(), when(task.created_at_ms, now_ms)]);
    t.add_row(vec!["updated".to_owned(), when(task.updated_at_ms, now_ms)]);
    if let Some(error) = &task.last_error {
        t.add_row(vec!["last error".to_owned(), error.clone()]);
    }
    for (n, attempt) in task.history.iter().enumerate() {
        let error = attempt
            .error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        t.add_row(vec![
            format!("attempt {}", n + 1),
            format!(
                "{} at {}{error}",
                attempt.outcome,
                format_instant(attempt.ended_at_ms)
            ),
        ]);
    }
    t.add_row(vec![
        "body".to_owned(),
        body_words(&task.body, task.body_encoding),
    ]);
    t.to_string()
}

fn backoff_words(backoff: &delayq_client::Backoff) -> String {
    use delayq_client::Backoff;
    match backoff {
        Backoff::Fixed { ms } => format!("fixed {}", format_duration(*ms)),
        Backoff::Exponential { base_ms, max_ms } => format!(
            "exponential from {} up to {}",
            format_duration(*base_ms),
            format_duration(*max_ms)
        ),
        Backoff::Schedule { ms } => format!(
            "schedule {}",
            ms.iter()
                .map(|ms| format_duration(*ms))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A page of tasks, one per row, with a footer saying which page this is.
pub fn tasks(page: &TaskPage, now_ms: u64) -> String {
    let mut t = table(&["id", "state", "priority", "due", "retries", "ttr", "body"]);
    for task in &page.items {
        t.add_row(vec![
            task.id.clone(),
            task.state.name().to_owned(),
            task.priority.to_string(),
            when(task.due_ms, now_ms),
            task.retries.to_string(),
            format_duration(task.ttr_ms),
            short_body(&body_words(&task.body, task.body_encoding)),
        ]);
    }
    let pages = page.total.div_ceil(page.page_size.max(1)).max(1);
    format!(
        "{t}\n{} of {} tasks (page {} of {pages})",
        page.items.len(),
        page.total,
        page.page
    )
}

/// Popped tasks, one per row, with the receipt to pass to finish/release/touch.
pub fn deliveries(list: &[TaskDelivery], now_ms: u64) -> String {
    if list.is_empty() {
        return "no task became ready before the timeout".into();
    }
    let mut t = table(&[
        "topic", "id", "priority", "retries", "due", "ttr", "receipt", "body",
    ]);
    for d in list {
        t.add_row(vec![
            d.topic.clone(),
            d.id.clone(),
            d.priority.to_string(),
            d.retries.to_string(),
            when(d.due_ms, now_ms),
            format_duration(d.ttr_ms),
            d.receipt.clone(),
            short_body(&body_words(&d.body, d.body_encoding)),
        ]);
    }
    t.to_string()
}

/// The counters of topics, one topic per row.
pub fn stats(rows: &[(String, StatsView)], now_ms: u64) -> String {
    let mut t = table(&[
        "topic",
        "delayed",
        "ready",
        "active",
        "dead",
        "finished",
        "cancelled",
        "total",
        "next due",
        "paused",
    ]);
    for (name, s) in rows {
        t.add_row(vec![
            name.clone(),
            s.delayed.to_string(),
            s.ready.to_string(),
            s.active.to_string(),
            s.dead.to_string(),
            s.finished.to_string(),
            s.cancelled.to_string(),
            s.total.to_string(),
            s.next_due_ms
                .map(|at| when(at, now_ms))
                .unwrap_or_else(|| "-".into()),
            pause_cell(s, now_ms),
        ]);
    }
    if rows.is_empty() {
        return format!("{t}\nno topics");
    }
    t.to_string()
}

/// How a schedule recurs, in words: `cron 30 2 * * * (Europe/Berlin)` or `every 1s`.
fn recurrence(s: &ScheduleView) -> String {
    match (&s.cron, s.every_ms) {
        (Some(cron), _) => format!("cron {cron} ({})", s.timezone.as_deref().unwrap_or("UTC")),
        (None, Some(every)) => format!("every {}", format_duration(every)),
        (None, None) => "-".into(),
    }
}

/// One schedule: its definition, its pending occurrence and the next ones.
pub fn schedule(s: &ScheduleView, now_ms: u64) -> String {
    let mut t = table(&["field", "value"]);
    let missed = serde_json::to_value(s.missed)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let rows: Vec<(&str, String)> = vec![
        ("topic", s.topic.clone()),
        ("name", s.name.clone()),
        ("recurs", recurrence(s)),
        ("paused", if s.paused { "yes".into() } else { "no".into() }),
        ("missed", missed),
        (
            "body",
            short_body(&body_words(&s.body, s.body_encoding.unwrap_or_default())),
        ),
        (
            "pending",
            s.cursor_ms
                .filter(|&c| c > now_ms)
                .map(|c| format!("{}@{c}, {}", s.name, when(c, now_ms)))
                .unwrap_or_else(|| "-".into()),
        ),
    ];
    for (field, value) in rows {
        t.add_row(vec![field.to_owned(), value]);
    }
    let mut text = t.to_string();
    if s.next_ms.is_empty() {
        text.push_str("\nno upcoming occurrences");
    } else {
        text.push_str("\nnext occurrences:");
        for at in &s.next_ms {
            text.push_str(&format!("\n  {}@{at}  {}", s.name, when(*at, now_ms)));
        }
    }
    text
}

/// Schedules, one per row, with their next occurrence.
pub fn schedules(list: &[ScheduleView], now_ms: u64) -> String {
    let mut t = table(&["topic", "name", "recurs", "paused", "next"]);
    for s in list {
        t.add_row(vec![
            s.topic.clone(),
            s.name.clone(),
            recurrence(s),
            if s.paused { "yes".into() } else { "no".into() },
            s.next_ms
                .first()
                .map(|&at| when(at, now_ms))
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    if list.is_empty() {
        return format!("{t}\nno schedules");
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use delayq::TaskInfo;
    use delayq_client::{State, TaskListItem};

    fn sample(state: State) -> TaskInfo {
        TaskInfo {
            id: "o-1".into(),
            topic: "orders".into(),
            body: "{\"order\":1}".into(),
            priority: delayq::DEFAULT_PRIORITY,
            state,
            due_ms: 1_000 + 900_000,
            delay_ms: 900_000,
            ttr_ms: 30_000,
            max_retries: 3,
            retries: 1,
            created_at_ms: 1_000,
            updated_at_ms: 1_000,
            backoff: Some(delayq_client::Backoff::Schedule {
                ms: vec![120_000, 600_000],
            }),
            deadline_ms: None,
            last_error: Some("boom".into()),
            history: Vec::new(),
            trace: None,
            expires_at_ms: None,
            on_expire: delayq::OnExpire::Dead,
            key: None,
        }
    }

    #[test]
    fn task_shows_state_by_name_and_times_readably() {
        let out = task(&TaskView::from(sample(State::Dead)), 1_000);
        for expected in [
            "dead",
            "in 15m",
            "1970-01-01T00:15:01.000Z",
            "1 of 3",
            "schedule 2m, 10m",
            "boom",
        ] {
            assert!(out.contains(expected), "{expected} missing from\n{out}");
        }
        assert!(!out.contains("expires"), "{out}");
        let expiring = TaskInfo {
            expires_at_ms: Some(3_601_000),
            on_expire: delayq::OnExpire::Drop,
            ..sample(State::Ready)
        };
        let out = task(&TaskView::from(expiring), 1_000);
        assert!(out.contains("(in 1h) (then deleted)"), "{out}");
    }

    #[test]
    fn tasks_table_has_columns_and_footer() {
        let page = TaskPage {
            items: vec![TaskListItem::from(sample(State::Ready))],
            total: 120,
            page: 2,
            page_size: 50,
        };
        let out = tasks(&page, 1_000);
        for expected in [
            "id",
            "state",
            "due",
            "ready",
            "1 of 120 tasks (page 2 of 3)",
        ] {
            assert!(out.contains(expected), "{expected} missing from\n{out}");
        }
    }

    #[test]
    fn binary_bodies_are_decoded_and_priority_shown() {
        let binary = TaskInfo {
            body: vec![0xff, b'a', 0x00],
            priority: 7,
            ..sample(State::Ready)
        };
        let out = task(&TaskView::from(binary), 1_000);
        assert!(
            out.contains("\\xffa\\x00 (binary, 3 bytes)"),
            "the decoded body is missing from\n{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.contains("priority") && l.contains(" 7 ")),
            "the priority is missing from\n{out}"
        );
        assert_eq!(body_words("plain", BodyEncoding::Text), "plain");
    }

    #[test]
    fn pauses_in_words() {
        let pause = |paused, until| PauseData {
            topic: "t".into(),
            paused,
            paused_until_ms: until,
        };
        assert_eq!(pause_words(&pause(false, None), 0), "is not paused");
        assert_eq!(
            pause_words(&pause(true, None), 0),
            "is paused until resumed"
        );
        assert!(pause_words(&pause(true, Some(60_000)), 0).contains("(in 1m)"));
    }

    #[test]
    fn bodies_are_cut_to_one_short_line() {
        assert_eq!(short_body("a\nb"), "a b");
        let long = "x".repeat(100);
        let cut = short_body(&long);
        assert_eq!(cut.chars().count(), BODY_WIDTH);
        assert!(cut.ends_with('…'));
    }
}
