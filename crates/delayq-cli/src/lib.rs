//! The library behind the `delayq` binary.
//!
//! `main.rs` only parses the command line and hands over: `delayq serve` to
//! `delayq_daemon::serve`, every other command to [`run`]. The pieces:
//!
//! - [`args`]: the raw flags (clap derive).
//! - [`config`]: raw flags → validated plans.
//! - [`commands`]: one client command each, printing tables or `--json`.
//! - [`import`]: `delayq add --file`, JSON lines in batches.
//! - [`bench`]: `delayq bench`, the end-to-end load generator.
//! - [`beanstalkd`]: `delayq beanstalkd`, beanstalkd's flags mapped to `delayq serve`.
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
