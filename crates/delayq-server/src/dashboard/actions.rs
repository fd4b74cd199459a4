//! `POST /ui/act`: every button and form of the dashboard.
//!
//! A form names its `action` and carries the fields of the matching API request. They are
//! read into that request's type ([`Params::request`]: empty fields left out, a bad value a
//! 400 naming the field) and handed to the API's own handler, so the dashboard validates,
//! checks topics, counts metrics and fails exactly like `POST /cancel`, `/reschedule`, ... do;
//! a field the dashboard sets itself is set on the typed request, so a renamed field fails to
//! compile. The answer is a redirect back (`back`, a local path) with a notice, or with the
//! server's error message to show.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use delayq_api::{RequeueRequest, RescheduleRequest, WholeMillis};
use serde::de::DeserializeOwned;

use super::params::{Params, query};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::AppError;
use crate::extract::JsonBody;
use crate::handlers::{add, control, manage};

/// `POST /ui/act`.
pub(super) async fn act(State(state): State<AppState>, caller: Caller, body: Bytes) -> Response {
    let form = Params::parse(&String::from_utf8_lossy(&body));
    let back = local(form.get("back"));
    match apply(&state, &caller, &form).await {
        Ok((notice, to)) => Redirect::to(&with(&to.unwrap_or(back), "notice", &notice)),
        Err(err) => Redirect::to(&with(
            &back,
            "error",
            &format!("{}: {}", err.status().as_u16(), err.public_message()),
        )),
    }
    .into_response()
}

/// Runs one action; returns the notice to show and, when the page acted on is gone or new,
/// where to go instead of back.
async fn apply(
    state: &AppState,
    caller: &Caller,
    form: &Params,
) -> Result<(String, Option<String>), AppError> {
    let act = Act {
        state,
        caller,
        form,
    };
    let notice = match form.required("action")? {
        "cancel" => {
            let _ = manage::cancel(act.state(), act.caller(), act.body()?).await?;
            format!("Cancelled {}.", act.key())
        }
        "delete" => {
            let _ = manage::delete(act.state(), act.caller(), act.body()?).await?;
            format!("Deleted {}.", act.key())
        }
        "requeue" => {
            let _ = manage::requeue(act.state(), act.caller(), act.body()?).await?;
            format!("Requeued {}.", act.key())
        }
        "requeue_all" => act.requeue_all().await?,
        "bury" => {
            let _ = control::bury(act.state(), act.caller(), act.body()?).await?;
            format!("Buried {}.", act.key())
        }
        "reschedule" => act.reschedule(false).await?,
        "run_now" => act.reschedule(true).await?,
        "pause" => {
            let _ = control::pause(act.state(), act.caller(), act.body()?).await?;
            format!("Paused {}.", act.topic())
        }
        "resume" => {
            let _ = control::resume(act.state(), act.caller(), act.body()?).await?;
            format!("Resumed {}.", act.topic())
        }
        "add" => return act.add().await,
        other => {
            return Err(AppError::invalid(
                "action",
                format!(
                    "is {other:?}; expected cancel, delete, requeue, requeue_all, bury, \
                     reschedule, run_now, pause, resume or add"
                ),
            ));
        }
    };
    // A deleted task has no page any more; its topic's page is the `back` of that form.
    Ok((notice, None))
}

/// One action of a form: what the handlers are called with.
struct Act<'a> {
    state: &'a AppState,
    caller: &'a Caller,
    form: &'a Params,
}

impl Act<'_> {
    fn state(&self) -> State<AppState> {
        State(self.state.clone())
    }

    fn caller(&self) -> Caller {
        self.caller.clone()
    }

    /// The form as the body of the API request `T`.
    fn body<T: DeserializeOwned>(&self) -> Result<JsonBody<T>, AppError> {
        self.form.request().map(JsonBody)
    }

    fn topic(&self) -> &str {
        self.form.get("topic").unwrap_or("?")
    }

    /// `id of topic`, for notices.
    fn key(&self) -> String {
        format!("{} of {}", self.form.get("id").unwrap_or("?"), self.topic())
    }

    async fn requeue_all(&self) -> Result<String, AppError> {
        let mut req: RequeueRequest = self.form.request()?;
        req.all = Some(true);
        let done = manage::requeue(self.state(), self.caller(), JsonBody(req)).await?;
        Ok(format!("Requeued {} dead tasks.", done.0.data.requeued))
    }

    /// `reschedule`, or `run_now`: a reschedule to now.
    async fn reschedule(&self, now: bool) -> Result<String, AppError> {
        let mut req: RescheduleRequest = self.form.request()?;
        if now {
            req.delay_ms = Some(WholeMillis(0));
        }
        let got = control::reschedule(self.state(), self.caller(), JsonBody(req)).await?;
        let state = got.0.data.state_name;
        Ok(format!("Rescheduled {}: now {}.", self.key(), state.name()))
    }

    /// Adds a task and goes to its page.
    async fn add(&self) -> Result<(String, Option<String>), AppError> {
        add::add_one(self.state, self.caller, self.form.request()?).await?;
        let (topic, id) = (
            self.form.get("topic").unwrap_or(""),
            self.form.get("id").unwrap_or(""),
        );
        let to = format!("/ui/task?{}", query(&[("topic", topic), ("id", id)]));
        Ok((format!("Added {}.", self.key()), Some(to)))
    }
}

/// A local path to go back to; anything else goes to the overview.
fn local(back: Option<&str>) -> String {
    match back {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p.to_owned(),
        _ => "/".to_owned(),
    }
}

/// `path` with one more query parameter (any earlier notice or error dropped).
fn with(path: &str, name: &str, value: &str) -> String {
    let (base, q) = path.split_once('?').unwrap_or((path, ""));
    let mut pairs: Vec<(String, String)> = Params::parse(q)
        .pairs()
        .iter()
        .filter(|(k, _)| k != "notice" && k != "error")
        .cloned()
        .collect();
    pairs.push((name.to_owned(), value.to_owned()));
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    format!("{base}?{}", query(&refs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_become_the_request() {
        let form = Params::parse("action=reschedule&topic=t&id=a&delay_ms=250&back=%2F&run_at_ms=");
        let req: RescheduleRequest = form.request().unwrap();
        assert_eq!((req.topic.as_str(), req.id.as_str()), ("t", "a"));
        assert_eq!(
            (req.delay_ms, req.run_at_ms),
            (Some(WholeMillis(250)), None)
        );
        let bad = Params::parse("topic=t&id=a&delay_ms=soon");
        let err = bad.request::<RescheduleRequest>().unwrap_err();
        assert_eq!(err.status(), 400);
        assert_eq!(err.field(), Some("delay_ms"), "{err}");
        let missing = Params::parse("topic=t&id=");
        let err = missing.request::<RescheduleRequest>().unwrap_err();
        assert_eq!(err.field(), Some("id"), "{err}");
    }

    #[test]
    fn back_links_stay_local_and_carry_one_message() {
        assert_eq!(local(Some("https://evil.example/")), "/");
        assert_eq!(local(Some("//evil.example")), "/");
        assert_eq!(
            with("/ui/task?topic=t&id=a&error=old", "notice", "ok now"),
            "/ui/task?topic=t&id=a&notice=ok+now"
        );
        assert_eq!(with("/", "error", "x"), "/?error=x");
    }
}
