//! The web dashboard (docs/design.md §10, docs/dashboard.md): every topic and task of the
//! queue seen and operated from a browser, served by `delayq serve` at `/`.
//!
//! Design, chosen to be the smallest stack a Rust team can keep:
//! - **Server-rendered HTML.** Every page is rendered here with `maud` (compile-time templates
//!   that HTML-escape every value), from the same [`delayq::Queue`] the API uses. Nothing is
//!   built with Node and nothing is fetched from the network at build or run time: the
//!   stylesheet and the one script are our own files, embedded with `include_str!`.
//! - **Charts drawn on the server.** Throughput, lateness and the due-time timeline are SVG
//!   drawn by `plotters`' SVG backend (`charts.rs`) and inlined in the page.
//! - **Live updates without reloads.** A page marks its changing part with `data-live`; the
//!   script asks the server for that part again every two seconds (the same handler, told by
//!   the `X-Delayq-Fragment` header to render only the part) and swaps it in. When a request
//!   fails the page says "server not answering" and keeps trying; a storage outage (503) is
//!   rendered by the server as a banner in place of the part, so both recover by themselves.
//! - **The API's own rules.** Actions are HTML form POSTs to `/ui/act`, turned into the API's
//!   request types and handed to the API's handlers (`actions.rs`): the same validation, topic
//!   checks, metrics and errors. Auth is the API's tokens (`session.rs`): the login page takes
//!   a token and keeps it in an HttpOnly, SameSite=Strict session cookie; a read-only token
//!   sees no action buttons and its POSTs are refused by the server; POSTs must come from the
//!   same origin. TLS is the API's, as the dashboard is served on the same listener.
//!
//! Paths: `/` (overview), `/ui/topic?name=`, `/ui/task?topic=&id=`, `/ui/find?id=&topic=`,
//! `/ui/act` (POST), `/ui/login`, `/ui/logout`, `/ui/app.js`, `/ui/style.css`. Everything
//! but `/` lives under `/ui/`, apart from the API's paths.

mod actions;
mod activity;
mod assets;
mod charts;
mod pages;
mod params;
mod session;
mod views;

use axum::Router;
use axum::middleware;
use axum::routing::{get, post};

use crate::app::AppState;

/// How the dashboard is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Whether `/` serves the dashboard (`--no-dashboard` turns it off).
    pub enabled: bool,
    /// Whether the session cookie is marked `Secure` (the server speaks HTTPS).
    pub secure_cookie: bool,
}

impl Options {
    /// The dashboard on `/` or not, its cookie marked `Secure` or not (HTTPS).
    pub fn new(enabled: bool, secure_cookie: bool) -> Options {
        Options {
            enabled,
            secure_cookie,
        }
    }
}

/// The dashboard's routes over `state`, to merge into the server's router; none when the
/// dashboard is off. The pages and actions sit behind the session check; the login page and
/// the static files do not.
pub fn routes(state: &AppState) -> Router<AppState> {
    if !state.dashboard().enabled {
        return Router::new();
    }
    let guarded = Router::new()
        .route("/", get(pages::overview))
        .route("/ui/topic", get(pages::topic))
        .route("/ui/task", get(pages::task))
        .route("/ui/find", get(pages::find))
        .route("/ui/act", post(actions::act))
        .route("/ui/logout", post(session::logout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            session::require_session,
        ));
    let open = Router::new()
        .route("/ui/login", get(session::login_page).post(session::login))
        .route("/ui/app.js", get(assets::script))
        .route("/ui/style.css", get(assets::stylesheet));
    guarded.merge(open)
}
