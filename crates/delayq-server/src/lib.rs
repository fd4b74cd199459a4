//! The delayq HTTP server: the seqdelay-compatible JSON API of docs/design.md §3 over a
//! [`delayq::Queue`], its configuration and its lifecycle.
//!
//! Layout:
//! - [`config`]: `delayq serve` flags ([`ServeArgs`]) → one validated [`ServerConfig`].
//! - [`serve`](mod@serve): storage selection, binding, graceful shutdown.
//! - [`logging`]: log lines on stderr, coloured only on a terminal.
//! - [`app`](mod@app): the router and its shared [`AppState`].
//! - [`handlers`]: the endpoints, one file per area.
//! - [`error`]: [`AppError`] and the response envelope; [`extract`]: the JSON and query
//!   extractors whose rejections answer in that envelope.
//! - [`dashboard`]: the web dashboard at `/`, server-rendered over the same queue and auth.
//! - [`history`]: per-second activity over the last hour, for the dashboard.
//! - [`auth`]: bearer tokens; [`metrics`]: `/metrics`; [`openapi`]: `/openapi.json`. The
//!   JSON shapes are the contract crate's, [`delayq_api`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use delayq_server::{ServerConfig, serve, shutdown_signal};
//!
//! let config = ServerConfig::default();
//! serve(config, shutdown_signal()).await?;
//! # Ok(()) }
//! ```

pub mod app;
pub mod auth;
pub mod config;
pub mod dashboard;
pub mod error;
pub mod extract;
pub mod handlers;
pub mod history;
pub mod logging;
pub mod metrics;
pub mod openapi;
pub mod serve;

pub use app::{AppState, app};
pub use config::{ConfigError, ServeArgs, ServerConfig};
pub use error::AppError;
pub use logging::init_tracing;
pub use serve::{ServerError, build_queue, run, serve, shutdown_signal};
