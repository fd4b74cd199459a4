//! Logging: where log lines go and what they look like.
//!
//! Lines go to stderr, so that standard output stays free for whatever a caller pipes. Text
//! lines are coloured only when stderr is a terminal and `NO_COLOR` is not set
//! (<https://no-color.org>): a log file or a journal gets plain text, never ANSI escapes.
//! `--log-format json` writes one JSON object per line, never coloured.

use std::ffi::OsString;
use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;

use crate::ServerError;
use crate::config::LogFormat;

/// Installs the global `tracing` subscriber: level filter from `RUST_LOG` (default `info`),
/// lines in `format` on stderr, coloured only on a terminal. Call once, early, from the
/// binary; a second call is an error.
pub fn init_tracing(format: LogFormat) -> Result<(), ServerError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let colour = colour_wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR"),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
        LogFormat::Text => builder.with_ansi(colour).try_init(),
    };
    result.map_err(|e| ServerError::Logging(e.to_string()))
}

/// Whether text lines get colour: only on a terminal, and not when `NO_COLOR` is set to a
/// non-empty value.
fn colour_wanted(terminal: bool, no_color: Option<OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let table: [(bool, Option<&str>, bool); 5] = [
            (true, None, true),
            (true, Some(""), true),
            (true, Some("1"), false),
            (false, None, false),
            (false, Some("1"), false),
        ];
        for (terminal, no_color, want) in table {
            let got = colour_wanted(terminal, no_color.map(OsString::from));
            assert_eq!(got, want, "terminal {terminal}, NO_COLOR {no_color:?}");
        }
    }
}
