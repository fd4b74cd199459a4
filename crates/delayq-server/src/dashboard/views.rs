//! The pieces every page is made of: the layout (top bar with the find box, banners, the
//! "server not answering" strip), error banners, the login page, and small formatters.
//!
//! Every value goes through maud's `(...)` splices, which HTML-escape it: a task body or
//! id holding `<script>` is shown as text, never run.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::AppError;

/// What the layout needs to know about the request.
pub(super) struct Ctx<'a> {
    /// Who is looking; decides whether action buttons are drawn.
    pub caller: &'a Caller,
    /// Whether the server has tokens (then a logout button is shown).
    pub auth_on: bool,
    /// A message carried over from an action (`?notice=` or `?error=`).
    pub flash: Option<Flash>,
    /// The topic the page is about, to prefill the find box.
    pub topic: Option<&'a str>,
}

impl<'a> Ctx<'a> {
    /// The context of a page for `caller`, about `topic` if any.
    pub fn new(
        state: &AppState,
        caller: &'a Caller,
        flash: Option<Flash>,
        topic: Option<&'a str>,
    ) -> Self {
        Ctx {
            caller,
            auth_on: state.auth().is_enabled(),
            flash,
            topic,
        }
    }

    /// Whether the caller may act (a read-only token may not).
    pub fn can_write(&self) -> bool {
        !self.caller.is_read_only()
    }
}

/// A one-time message after an action.
pub(super) enum Flash {
    /// It worked.
    Notice(String),
    /// It was refused; the server's message.
    Error(String),
}

/// A whole page: the top bar, banners, then `body`.
pub(super) fn page(title: &str, ctx: &Ctx<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · delayq" }
                link rel="stylesheet" href="/ui/style.css";
                script src="/ui/app.js" defer {}
            }
            body {
                div #offline hidden role="alert" {
                    "Server not answering: retrying every 2 s. The numbers below may be stale."
                }
                header.top {
                    a.brand href="/" { "delayq" }
                    form #find method="get" action="/ui/find" {
                        input name="topic" placeholder="topic (optional)" value=[ctx.topic] size="16";
                        input name="id" placeholder="find task by id" required size="28";
                        button type="submit" { "Find" }
                    }
                    span.spacer {}
                    @if ctx.caller.is_read_only() { span.who #read-only { "read-only token" } }
                    @if ctx.auth_on {
                        form method="post" action="/ui/logout" {
                            button.secondary type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    @match &ctx.flash {
                        Some(Flash::Notice(text)) => div.banner.notice #notice { (text) },
                        Some(Flash::Error(text)) => div.banner.error #error role="alert" { (text) },
                        None => {},
                    }
                    (body)
                }
            }
        }
    }
}

/// The part of a page that refreshes itself (see `assets/app.js`).
pub(super) fn live(content: Markup) -> Markup {
    html! { div #live data-live="1" { (content) } }
}

/// A banner for an error in place of a page's content. A storage outage says the page
/// retries by itself, which it does: the live part is fetched again until it renders.
pub(super) fn error_banner(err: &AppError) -> Markup {
    let status = err.status();
    let message = err.public_message();
    html! {
        @if status == StatusCode::SERVICE_UNAVAILABLE {
            div.banner.outage #outage role="alert" {
                strong { "Storage unavailable (503). " }
                (message)
                " This page keeps retrying and recovers by itself when storage is back."
            }
        } @else {
            div.banner.error #error role="alert" {
                strong { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) ": " }
                (message)
            }
        }
    }
}

/// A page that is only an error, with the error's status.
pub(super) fn error_page(state: &AppState, caller: Option<&Caller>, err: &AppError) -> Response {
    let anyone = Caller::default();
    let ctx = Ctx {
        caller: caller.unwrap_or(&anyone),
        auth_on: state.auth().is_enabled(),
        flash: None,
        topic: None,
    };
    let body = html! { (error_banner(err)) p { a href="/" { "Back to the overview" } } };
    (err.status(), Html(page("Error", &ctx, body).into_string())).into_response()
}

/// The login page, with an error when a token was refused.
pub(super) fn login(next: &str, err: Option<&AppError>, status: StatusCode) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Log in · delayq" }
                link rel="stylesheet" href="/ui/style.css";
            }
            body {
                main.login {
                    div.card {
                        h1 { "delayq" }
                        p.muted { "This server needs a token. It is kept for this browser session only." }
                        @if let Some(err) = err { (error_banner(err)) }
                        form method="post" action="/ui/login" {
                            input type="hidden" name="next" value=(next);
                            label for="token" { "Token" }
                            input #token type="password" name="token" autocomplete="off" required autofocus;
                            button type="submit" { "Log in" }
                        }
                    }
                }
            }
        }
    };
    (status, Html(markup.into_string())).into_response()
}

/// Renders a page or, when the script asks for the live part only, that part; an error is
/// shown as a banner in its place with the error's status.
pub(super) fn respond(
    fragment_only: bool,
    content: Result<Markup, AppError>,
    whole: impl FnOnce(Markup) -> Markup,
) -> Response {
    let (status, inner) = match content {
        Ok(markup) => (StatusCode::OK, markup),
        Err(err) => (err.status(), error_banner(&err)),
    };
    let body = if fragment_only {
        inner
    } else {
        whole(live(inner))
    };
    (status, Html(body.into_string())).into_response()
}

/// A moment as a relative time ("in 4m 10s", "12s ago") with the UTC time as its tooltip.
pub(super) fn when(ms: u64, now: u64) -> Markup {
    let relative = if ms >= now {
        format!("in {}", duration(ms - now))
    } else {
        format!("{} ago", duration(now - ms))
    };
    html! { time datetime=(utc(ms)) title=(utc(ms)) { (relative) } }
}

/// Epoch milliseconds as an RFC 3339 UTC time.
pub(super) fn utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| format!("{ms} ms"), |t| t.to_string())
}

/// A duration in ms, shortly: `850ms`, `12s`, `4m 10s`, `3h 2m`, `5d 4h`.
pub(super) fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A state name as a coloured badge.
pub(super) fn state_badge(state: delayq::State) -> Markup {
    let name = state.to_string();
    html! { span class=(format!("badge s-{name}")) data-state=(name) { (name) } }
}

/// An inline SVG drawn by [`super::charts`]; it is our own markup, not user input.
pub(super) fn svg(svg: String) -> Markup {
    PreEscaped(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_shortly() {
        for (ms, want) in [
            (850, "850ms"),
            (12_000, "12s"),
            (250_000, "4m 10s"),
            (3 * 3_600_000 + 120_000, "3h 2m"),
            (5 * 86_400_000 + 4 * 3_600_000, "5d 4h"),
        ] {
            assert_eq!(duration(ms), want);
        }
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn text_is_escaped() {
        let markup = html! { p { ("<script>alert(1)</script>") } }.into_string();
        assert_eq!(markup, "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>");
    }
}
