//! `POST /ui/act`: every button and form of the dashboard.
//!
//! A form names its `action` and carries the fields of the matching API request. They are
//! turned into that request's JSON (numbers as numbers, empty fields left out) and handed to
//! the API's own handler, so the dashboard validates, checks topics, counts metrics and
//! fails exactly like `POST /cancel`, `/reschedule`, ... do. The answer is a redirect back
//! (`back`, a local path) with a notice, or with the server's error message to show.

use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::params::{Params, query};
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::AppError;
use crate::extract::{JsonBody, parse_json};
use crate::handlers::{control, manage};

/// Form fields that the API reads as numbers.
const NUMBERS: &[&str] = &[
    "delay_ms",
    "run_at_ms",
    "for_ms",
    "priority",
    "ttr_ms",
    "max_retries",
];
/// Form fields that are the dashboard's own, not the request's.
const OWN: &[&str] = &["action", "back"];

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
    let action = form.required("action")?;
    let fields = request_json(form);
    let st = || State(state.clone());
    let who = || caller.clone();
    let key = || {
        format!(
            "{} of {}",
            form.get("id").unwrap_or("?"),
            form.get("topic").unwrap_or("?")
        )
    };
    let notice = match action {
        "cancel" => {
            let _ = manage::cancel(st(), who(), JsonBody(req(&fields)?)).await?;
            format!("Cancelled {}.", key())
        }
        "delete" => {
            let _ = manage::delete(st(), who(), JsonBody(req(&fields)?)).await?;
            format!("Deleted {}.", key())
        }
        "requeue" => {
            let _ = manage::requeue(st(), who(), JsonBody(req(&fields)?)).await?;
            format!("Requeued {}.", key())
        }
        "requeue_all" => {
            let mut all = fields.clone();
            all.insert("all".into(), Value::Bool(true));
            let n = manage::requeue(st(), who(), JsonBody(req(&all)?)).await?;
            format!("Requeued {} dead tasks.", n.0.data.requeued)
        }
        "bury" => {
            let _ = control::bury(st(), who(), JsonBody(req(&fields)?)).await?;
            format!("Buried {}.", key())
        }
        "reschedule" | "run_now" => {
            let mut r = fields.clone();
            if action == "run_now" {
                r.insert("delay_ms".into(), Value::from(0));
            }
            let got = control::reschedule(st(), who(), JsonBody(req(&r)?)).await?;
            format!(
                "Rescheduled {}: now {}.",
                key(),
                serde_json::to_value(&got.0.data)
                    .ok()
                    .and_then(|v| v
                        .get("state_name")
                        .and_then(Value::as_str)
                        .map(str::to_owned))
                    .unwrap_or_else(|| "rescheduled".into())
            )
        }
        "pause" => {
            let _ = control::pause(st(), who(), JsonBody(req(&fields)?)).await?;
            format!("Paused {}.", form.get("topic").unwrap_or("?"))
        }
        "resume" => {
            let _ = control::resume(st(), who(), JsonBody(req(&fields)?)).await?;
            format!("Resumed {}.", form.get("topic").unwrap_or("?"))
        }
        "add" => {
            let _ =
                crate::handlers::add::add(st(), who(), crate::extract::RawBody(to_bytes(&fields)))
                    .await?;
            let (topic, id) = (
                form.get("topic").unwrap_or(""),
                form.get("id").unwrap_or(""),
            );
            let to = format!("/ui/task?{}", query(&[("topic", topic), ("id", id)]));
            return Ok((format!("Added {}.", key()), Some(to)));
        }
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

/// The form's fields as the API request's JSON object.
fn request_json(form: &Params) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, value) in form.pairs() {
        if value.is_empty() || OWN.contains(&name.as_str()) {
            continue;
        }
        let v = if NUMBERS.contains(&name.as_str()) {
            // Not a number: left as text, so the API's validation names the field.
            value
                .trim()
                .parse::<i64>()
                .map_or_else(|_| Value::String(value.clone()), Value::from)
        } else {
            Value::String(value.clone())
        };
        out.insert(name.clone(), v);
    }
    out
}

fn to_bytes(fields: &Map<String, Value>) -> Bytes {
    Bytes::from(serde_json::to_vec(fields).unwrap_or_default())
}

/// Reads the request type of an API handler from the fields, with the API's errors.
fn req<T: DeserializeOwned>(fields: &Map<String, Value>) -> Result<T, AppError> {
    parse_json(&to_bytes(fields))
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
    fn form_fields_become_the_request_json() {
        let form =
            Params::parse("action=reschedule&topic=t&id=a&delay_ms=250&back=%2F&body=&priority=x");
        let json = Value::Object(request_json(&form));
        assert_eq!(
            json,
            serde_json::json!({"topic": "t", "id": "a", "delay_ms": 250, "priority": "x"})
        );
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
