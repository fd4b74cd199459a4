//! The dashboard's two static files, our own, embedded in the binary so that nothing is
//! fetched at run time: the stylesheet and the live-update script.

use axum::http::header;
use axum::response::IntoResponse;

const SCRIPT: &str = include_str!("assets/app.js");
const STYLESHEET: &str = include_str!("assets/style.css");

/// `GET /ui/app.js`.
pub(super) async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        SCRIPT,
    )
}

/// `GET /ui/style.css`.
pub(super) async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STYLESHEET,
    )
}
