//! Who is using the dashboard: the API's tokens, kept for the browser session.
//!
//! With no token configured the dashboard is open, like the API. Otherwise the login page
//! asks for a token, checks it with [`crate::auth::Auth`] (the same constant-time comparison
//! and the same scopes), and keeps it in a session cookie: `HttpOnly` (scripts cannot read
//! it), `SameSite=Strict` (other sites' pages do not send it), `Secure` when the server
//! speaks HTTPS, no expiry (it ends with the browser session). The cookie holds the token
//! itself rather than a server-side session id, so every instance in Redis mode accepts it
//! and nothing is kept per browser. An `Authorization: Bearer` header is accepted as well.
//!
//! Every POST must come from the dashboard's own origin (its `Origin`, or failing that its
//! `Referer`, names the `Host` it was sent to): a form on another site cannot act with the
//! cookie. Then the token's write right is checked by the API's own rule
//! ([`crate::auth::Caller::check_method`]), so a read-only token's forged POST is refused by
//! the server, not only hidden in the page.

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::params::{Params, query};
use super::views;
use crate::app::AppState;
use crate::auth::Caller;
use crate::error::AppError;

/// The session cookie's name.
pub(super) const COOKIE: &str = "delayq_session";

/// Middleware of the dashboard's pages and actions: finds the [`Caller`] (or sends a browser
/// to the login page), checks a POST's origin and write right, and stores the caller.
pub(super) async fn require_session(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let caller = match caller_of(&state, req.headers()) {
        Ok(caller) => caller,
        Err(_) if req.method() == Method::GET || req.method() == Method::HEAD => {
            let here = req
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            return Redirect::to(&format!("/ui/login?{}", query(&[("next", &here)])))
                .into_response();
        }
        Err(err) => return views::error_page(&state, None, &err),
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let checked = same_origin(req.headers())
            .and_then(|()| caller.check_method(req.method(), req.uri().path()));
        if let Err(err) = checked {
            return views::error_page(&state, Some(&caller), &err);
        }
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The caller of a request: anyone when auth is off, else the token of the session cookie
/// or of the `Authorization` header.
fn caller_of(state: &AppState, headers: &HeaderMap) -> Result<Caller, AppError> {
    let auth = state.auth();
    if !auth.is_enabled() {
        return Ok(Caller::default());
    }
    if let Some(token) = cookie_token(headers) {
        return auth.authenticate(Some(format!("Bearer {token}").as_bytes()));
    }
    auth.authenticate(
        headers
            .get(header::AUTHORIZATION)
            .map(HeaderValue::as_bytes),
    )
}

/// The token in the session cookie, if any.
fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| {
            form_urlencoded::parse(format!("t={value}").as_bytes())
                .map(|(_, v)| v.into_owned())
                .next()
                .unwrap_or_default()
        })
        .filter(|t| !t.is_empty())
}

/// Refuses a POST that does not say it comes from the page's own origin.
fn same_origin(headers: &HeaderMap) -> Result<(), AppError> {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let from = headers
        .get(header::ORIGIN)
        .or_else(|| headers.get(header::REFERER))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = from
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""));
    match origin_host {
        Some(h) if !host.is_empty() && h.eq_ignore_ascii_case(host) => Ok(()),
        _ => Err(AppError::Forbidden(format!(
            "a dashboard action must be posted from the dashboard's own page (origin {from:?} \
             is not {host:?})"
        ))),
    }
}

/// Where to go after logging in: a local path only, never another site.
fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(p) if p.starts_with('/') && !p.starts_with("//") && !p.contains('\\') => p,
        _ => "/",
    }
}

/// `GET /ui/login`.
pub(super) async fn login_page(
    State(state): State<AppState>,
    axum::extract::RawQuery(q): axum::extract::RawQuery,
) -> Response {
    let params = Params::parse(q.as_deref().unwrap_or(""));
    if !state.auth().is_enabled() {
        return Redirect::to("/").into_response();
    }
    views::login(local_path(params.get("next")), None, StatusCode::OK)
}

/// `POST /ui/login`: checks the token and keeps it in the session cookie.
pub(super) async fn login(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = Params::parse(&String::from_utf8_lossy(&body));
    let next = local_path(form.get("next")).to_owned();
    // Another site must not log a browser in with a token of its choosing either.
    if let Err(err) = same_origin(&headers) {
        return views::login(&next, Some(&err), StatusCode::FORBIDDEN);
    }
    let token = form.get("token").unwrap_or("").trim();
    match state
        .auth()
        .authenticate(Some(format!("Bearer {token}").as_bytes()))
    {
        Ok(_) => {
            let value: String = form_urlencoded::byte_serialize(token.as_bytes()).collect();
            let secure = if state.dashboard().secure_cookie {
                "; Secure"
            } else {
                ""
            };
            let cookie = format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict{secure}");
            (
                StatusCode::SEE_OTHER,
                [(header::SET_COOKIE, cookie), (header::LOCATION, next)],
            )
                .into_response()
        }
        Err(_) => views::login(
            &next,
            Some(&AppError::Unauthorized("unknown token")),
            StatusCode::UNAUTHORIZED,
        ),
    }
}

/// `POST /ui/logout`: forgets the session cookie.
pub(super) async fn logout() -> Response {
    let cookie = format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0");
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, cookie),
            (header::LOCATION, "/ui/login".to_owned()),
        ],
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k.clone(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_cookie_is_found_among_others_and_decoded() {
        let h = headers(&[(header::COOKIE, "a=1; delayq_session=t%2Bk%3D; b=2")]);
        assert_eq!(cookie_token(&h).as_deref(), Some("t+k="));
        assert_eq!(cookie_token(&headers(&[(header::COOKIE, "a=1")])), None);
    }

    #[test]
    fn posts_must_come_from_the_same_origin() {
        // (Host, Origin, Referer, allowed)
        let table = [
            ("h:1", Some("http://h:1"), None, true),
            ("h:1", Some("https://h:1"), None, true),
            ("h:1", None, Some("http://h:1/ui/task?id=1"), true),
            ("h:1", Some("http://evil:1"), Some("http://h:1/"), false),
            ("h:1", None, None, false),
            ("h:1", Some("null"), None, false),
        ];
        for (host, origin, referer, allowed) in table {
            let mut pairs = vec![(header::HOST, host)];
            pairs.extend(origin.map(|o| (header::ORIGIN, o)));
            pairs.extend(referer.map(|r| (header::REFERER, r)));
            let got = same_origin(&headers(&pairs));
            assert_eq!(got.is_ok(), allowed, "{host} {origin:?} {referer:?}");
        }
    }

    #[test]
    fn login_only_sends_to_local_paths() {
        for (next, want) in [
            (Some("/ui/topic?name=a"), "/ui/topic?name=a"),
            (Some("//evil.example/"), "/"),
            (Some("https://evil.example/"), "/"),
            (Some("/\\evil"), "/"),
            (None, "/"),
        ] {
            assert_eq!(local_path(next), want);
        }
    }
}
