//! The `delayq` binary: parses the command line and hands over to the libraries.
//!
//! `delayq serve` runs `delayq_daemon::serve` until SIGTERM or Ctrl-C (`delayq beanstalkd`
//! too, with its flags turned into serve's); every other command is
//! run by `delayq_cli::run`. Errors are printed once, as `error: ...`, and decide the exit
//! code: 0 success, 1 an API or usage error, 2 the server cannot be reached.

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: a request allocates and frees a few dozen small blocks
/// across two worker threads, and glibc spent about 9 % of the server's CPU on them
/// (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::Context as _;
use clap::Parser as _;
use delayq_cli::{Cli, Command, EXIT_ERROR};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // Help and version go to stdout with success; usage errors exit with 1, not
            // clap's 2, which this tool reserves for "cannot reach the server".
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(EXIT_ERROR)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Serve(args) => match serve(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("error: {err:#}");
                ExitCode::from(EXIT_ERROR)
            }
        },
        Command::Beanstalkd(args) => {
            // The same settings `delayq serve` would get from these flags.
            let argv = ["delayq".to_owned(), "serve".to_owned()]
                .into_iter()
                .chain(args.serve_args());
            match Cli::try_parse_from(argv) {
                Ok(Cli {
                    command: Command::Serve(args),
                }) => match serve(&args) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(err) => {
                        eprintln!("error: {err:#}");
                        ExitCode::from(EXIT_ERROR)
                    }
                },
                Ok(_) => ExitCode::from(EXIT_ERROR),
                Err(err) => {
                    let _ = err.print();
                    ExitCode::from(EXIT_ERROR)
                }
            }
        }
        command => {
            let runtime = match runtime() {
                Ok(runtime) => runtime,
                Err(err) => {
                    eprintln!("error: {err:#}");
                    return ExitCode::from(EXIT_ERROR);
                }
            };
            let mut stdout = std::io::stdout().lock();
            match runtime.block_on(delayq_cli::run(command, &mut stdout)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("error: {err}");
                    ExitCode::from(err.exit_code())
                }
            }
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

fn serve(args: &delayq_daemon::ServeArgs) -> anyhow::Result<()> {
    let config = delayq_daemon::ServerConfig::from_args(args).context("invalid server settings")?;
    delayq_daemon::init_tracing(config.log_format).context("cannot set up logging")?;
    runtime()?
        .block_on(delayq_daemon::serve(
            config,
            delayq_daemon::shutdown_signal(),
        ))
        .context("the server stopped with an error")
}
