//! The delayq HTTP app: the seqdelay-compatible JSON API of docs/design.md §3, the web
//! dashboard and `/metrics`, over a [`delayq::Queue`] and the services the composition root
//! hands it.
//!
//! This crate builds no backend and runs no process: `delayq-daemon` reads the configuration,
//! builds the queue, the push dispatcher, the beanstalk listener, the scheduler and the
//! history sampler, and serves the app with [`serve::serve_app`]. The app sees push delivery
//! only through [`PushControl`], so it depends on no storage or delivery crate.
//!
//! Layout:
//! - [`app`](mod@app): the router and its shared [`AppState`], built with its [`Services`].
//! - [`config`]: the validated settings the app takes ([`AppConfig`]).
//! - [`serve`](mod@serve): the listener (connection cap, slow clients, graceful stop) and
//!   HTTPS.
//! - [`handlers`]: the endpoints, one file per area.
//! - [`error`]: [`AppError`] and the response envelope; [`extract`]: the JSON and query
//!   extractors whose rejections answer in that envelope.
//! - [`dashboard`]: the web dashboard at `/`, server-rendered over the same queue and auth.
//! - [`history`]: per-second activity over the last hour, for the dashboard.
//! - [`auth`]: bearer tokens; [`metrics`]: `/metrics`; [`openapi`]: `/openapi.json`;
//!   [`push`]: the dispatcher as the app sees it. The JSON shapes are the contract crate's,
//!   [`delayq_api`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use delayq_server::AppState;
//! use delayq_server::config::AppConfig;
//!
//! # let (config, listener): (AppConfig, tokio::net::TcpListener) = todo!();
//! let state = AppState::new(delayq::Queue::memory(), &config);
//! let (stop, stopped) = tokio::sync::watch::channel(false);
//! tokio::spawn(delayq_server::serve::serve_app(listener, state, None, stopped));
//! # let _ = stop; Ok(()) }
//! ```

pub mod app;
pub mod auth;
pub mod config;
pub mod dashboard;
pub mod error;
pub mod extract;
pub mod handlers;
pub mod history;
pub mod metrics;
pub mod openapi;
pub mod push;
pub mod serve;

pub use app::{AppState, Services, app};
pub use config::AppConfig;
pub use error::AppError;
pub use push::PushControl;
