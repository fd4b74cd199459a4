//! Extractors whose rejections are [`AppError`]s, so that even a malformed request answers in
//! the envelope.
//!
//! [`JsonBody`] reads the body as JSON whatever its Content-Type says (seqdelay's README uses
//! `curl -d`, which sends a form type), treats an empty body as `{}` (so a missing field is
//! reported by name), ignores unknown fields, and reports a wrong type or value with the path
//! of the field (`tasks[3].delay_ms`), found by `serde_path_to_error`. A body over the request
//! limit is a 413 that names the limit. [`QueryParams`] does the same for a query string.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::app::AppState;
use crate::error::AppError;

/// A JSON request body of type `T`.
#[derive(Debug, Clone)]
pub struct JsonBody<T>(pub T);

/// The raw bytes of a request body, within the request size limit.
#[derive(Debug, Clone)]
pub struct RawBody(pub Bytes);

impl FromRequest<AppState> for RawBody {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        match Bytes::from_request(req, state).await {
            Ok(bytes) => Ok(RawBody(bytes)),
            Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                Err(AppError::TooLarge {
                    what: "the request body".into(),
                    reason: format!(
                        "it exceeds the limit of {} bytes (max_request_bytes)",
                        state.http().max_request_bytes
                    ),
                })
            }
            Err(rejection) => Err(AppError::Malformed(rejection.body_text())),
        }
    }
}

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a JSON body into `T`, naming the field of any error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AppError> {
    let bytes: &[u8] = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        None => b"{}",
        // serde would read a struct from an array too (by position); the API wants objects.
        Some(b'[') => {
            return Err(AppError::Malformed(
                "expected a JSON object, got an array".into(),
            ));
        }
        Some(_) => bytes,
    };
    // The common case parses once, without tracking the path; only a body that fails is
    // parsed again with it, to name the field in the error.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(json_error)?;
    de.end().map_err(|e| AppError::Malformed(format!("{e}")))?;
    Ok(value)
}

fn json_error(err: serde_path_to_error::Error<serde_json::Error>) -> AppError {
    let path = err.path().to_string();
    let inner = err.into_inner();
    // serde_json appends the position; the field name says more, so keep the message short.
    let position = format!(" at line {} column {}", inner.line(), inner.column());
    let full = inner.to_string();
    let message = full.strip_suffix(&position).unwrap_or(&full).to_owned();
    let at_root = path == "." || path.is_empty();
    if inner.is_syntax() || inner.is_eof() || inner.is_io() {
        return if at_root || message.contains("EOF") {
            AppError::Malformed(format!("the body is not valid JSON: {full}"))
        } else {
            AppError::invalid(path, message)
        };
    }
    classify_data_error(&path, at_root, message)
}

/// Turns a serde data error (missing field, wrong type, bad value) into an [`AppError`] that
/// names the field.
fn classify_data_error(path: &str, at_root: bool, message: String) -> AppError {
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        let field = if at_root {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        };
        return AppError::Missing { field };
    }
    if at_root {
        // The value as a whole has the wrong shape (an array, a string, ...): say what we want
        // without leaking Rust type names.
        let kind = message
            .strip_prefix("invalid type: ")
            .and_then(|m| m.split(',').next())
            .unwrap_or("something else");
        return AppError::Malformed(format!("expected a JSON object, got {kind}"));
    }
    AppError::invalid(path, message)
}

/// Query-string parameters of type `T`.
#[derive(Debug, Clone)]
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parse_query(parts.uri.query().unwrap_or("")).map(QueryParams)
    }
}

/// Parses a query string into `T`, naming the parameter of any error.
pub fn parse_query<T: DeserializeOwned>(query: &str) -> Result<T, AppError> {
    let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
    serde_path_to_error::deserialize(de).map_err(|err| {
        let path = err.path().to_string();
        let at_root = path == "." || path.is_empty();
        classify_data_error(&path, at_root, err.into_inner().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        id: String,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Probe {
        topic: String,
        delay_ms: Option<u64>,
        tasks: Option<Vec<Inner>>,
    }

    fn describe(err: AppError) -> (StatusCode, String, Option<String>) {
        (
            err.status(),
            err.to_string(),
            err.field().map(str::to_owned),
        )
    }

    #[test]
    fn json_errors_name_the_field() {
        let table: [(&str, Option<&str>, &str); 9] = [
            ("{", None, "not valid JSON"),
            ("[1, 2]", None, "expected a JSON object, got an array"),
            ("\"x\"", None, "expected a JSON object"),
            (r#"{"delay_ms": 5}"#, Some("topic"), "missing field topic"),
            ("", Some("topic"), "missing field topic"),
            (r#"{"topic": 5}"#, Some("topic"), "invalid type: integer"),
            (r#"{"topic": "t", "delay_ms": -1}"#, Some("delay_ms"), "-1"),
            (
                r#"{"topic": "t", "tasks": [{"id": "a"}, {}]}"#,
                Some("tasks[1].id"),
                "missing field tasks[1].id",
            ),
            (r#"{"topic": "t"} trailing"#, None, "trailing"),
        ];
        for (body, field, needle) in table {
            let (status, message, got_field) =
                describe(parse_json::<Probe>(body.as_bytes()).unwrap_err());
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(got_field.as_deref(), field, "{body}: {message}");
            assert!(message.contains(needle), "{body}: {message}");
        }
    }

    #[test]
    fn unknown_fields_are_ignored() {
        let p: Probe = parse_json(br#"{"topic": "t", "whatever": [1, {"x": null}]}"#).unwrap();
        assert_eq!(p.topic, "t");
    }

    #[test]
    fn query_errors_name_the_parameter() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Q {
            topic: String,
            page: Option<u64>,
        }
        let (_, message, field) = describe(parse_query::<Q>("page=2").unwrap_err());
        assert_eq!(field.as_deref(), Some("topic"), "{message}");
        let (_, message, field) = describe(parse_query::<Q>("topic=t&page=x").unwrap_err());
        assert_eq!(field.as_deref(), Some("page"), "{message}");
        let q: Q = parse_query("topic=a%3Ab&page=3").unwrap();
        assert_eq!((q.topic.as_str(), q.page), ("a:b", Some(3)));
    }
}
