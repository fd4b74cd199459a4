//! `delayq bench`: the load generator of `delayq-bench`, its errors turned into the
//! binary's (same messages, same exit codes).

use std::io::Write;

pub use delayq_bench::*;

use crate::error::CliError;

/// Runs the benchmark `args` asks for and prints its report on `out`.
pub async fn run(args: BenchArgs, out: &mut dyn Write) -> Result<(), CliError> {
    delayq_bench::run(args, out).await.map_err(CliError::from)
}
