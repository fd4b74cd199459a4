//! The delayq composition root: what `delayq serve` runs.
//!
//! This crate owns the configuration and the process: it reads the settings, builds the
//! queue on the chosen backend (memory, embedded log, Redis) and the services over it (the push
//! dispatcher, the beanstalk listener, the scheduler, the dashboard's history sampler, the
//! HTTP listener of `delayq-server`'s app), starts them in order with one
//! [`Daemon::start`] and stops them in reverse with one [`Daemon::stop`]. It is the only
//! crate that knows every backend; the HTTP app gets the queue and its services when it is
//! built and knows none of them.
//!
//! Layout:
//! - [`config`]: `delayq serve` flags ([`ServeArgs`]) → one validated [`ServerConfig`].
//! - `storage.rs`: [`build_queue`], the one place that picks the backend.
//! - `daemon.rs`: [`Daemon`], [`serve`] and [`run`]: the order of start and stop.
//! - `services.rs`: the services of a running server and the one mechanism that stops them.
//! - `signals.rs`: [`shutdown_signal`] (SIGTERM, Ctrl-C) and SIGUSR1 (beanstalk drain).
//! - [`logging`]: log lines on stderr, coloured only on a terminal.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use delayq_daemon::{ServerConfig, serve, shutdown_signal};
//!
//! let config = ServerConfig::default();
//! serve(config, shutdown_signal()).await?;
//! # Ok(()) }
//! ```

pub mod config;
mod daemon;
mod error;
pub mod logging;
mod otlp;
mod push;
mod services;
mod signals;
mod storage;

pub use config::{ConfigError, ServeArgs, ServerConfig};
pub use daemon::{Daemon, run, serve};
pub use error::ServerError;
pub use logging::init_tracing;
pub use push::PushDispatcher;
pub use signals::shutdown_signal;
pub use storage::build_queue;
