//! The library behind the `delayq` binary: flag parsing and thin calls.
//!
//! `main.rs` only parses the command line and hands over: `delayq serve` to
//! `delayq_daemon::serve` (the composition root), `delayq bench` to `delayq-bench`, every
//! other command to [`run`]. The pieces:
//!
//! - [`args`]: the raw flags (clap derive).
//! - [`config`]: raw flags → validated plans.
//! - [`commands`]: one client command each, printing tables or `--json`.
//! - [`import`]: `delayq add --file`, JSON lines in batches.
//! - [`bench`](mod@bench): `delayq bench`, a thin call into `delayq-bench` (the load generator).
//! - [`beanstalkd`]: `delayq beanstalkd`, beanstalkd's flags mapped to `delayq serve`.
//! - [`data`]: `delayq data inspect|repair` over an embedded data directory (`delayq-log`).
//! - [`output`], [`duration`]: rendering for people, and durations as people write them.
//! - [`error`]: [`CliError`] and the exit codes.

pub mod args;
pub mod beanstalkd;
pub mod bench;
pub mod commands;
pub mod config;
pub mod data;
pub mod duration;
pub mod error;
pub mod import;
pub mod output;

pub use args::{Cli, Command};
pub use commands::run;
pub use error::{CliError, EXIT_ERROR, EXIT_OK, EXIT_UNREACHABLE};
