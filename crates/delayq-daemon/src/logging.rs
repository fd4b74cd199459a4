//! Logging: where log lines go and what they look like.
//!
//! Lines go to stderr, so that standard output stays free for whatever a caller pipes. Text
//! lines are coloured only when stderr is a terminal and `NO_COLOR` is not set
//! (<https://no-color.org>): a log file or a journal gets plain text, never ANSI escapes.
//! `--log-format json` writes one JSON object per line, never coloured; a line written while
//! a request with a W3C trace context is served (its `traceparent`, made current by the HTTP
//! layer) starts with that context's `trace_id` and `span_id`, so logs and traces join in a
//! backend (docs/tracing.md).

use std::ffi::OsString;
use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

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
        LogFormat::Json => builder
            .json()
            .with_ansi(false)
            .map_event_format(WithTraceIds)
            .try_init(),
        LogFormat::Text => builder.with_ansi(colour).try_init(),
    };
    result.map_err(|e| ServerError::Logging(e.to_string()))
}

/// A JSON line formatter that puts the current trace context's ids first in the object.
struct WithTraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let Some(ids) = current_ids() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        writer.write_str(&with_ids(&line, &ids))
    }
}

/// The trace and span ids of the current OpenTelemetry context, in the W3C's hex.
fn current_ids() -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt as _;
    let cx = opentelemetry::Context::current();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

/// `line`, a JSON object, with the ids as its first members.
fn with_ids(line: &str, (trace_id, span_id): &(String, String)) -> String {
    match line.strip_prefix('{') {
        Some(rest) => format!("{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"),
        None => line.to_owned(),
    }
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
    fn ids_go_first_in_the_object() {
        let ids = (
            "4bf92f3577b34da6a3ce929d0e0e4736".to_owned(),
            "00f067aa0ba902b7".to_owned(),
        );
        let line = "{\"level\":\"WARN\",\"fields\":{\"message\":\"x\"}}\n";
        let got = with_ids(line, &ids);
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        assert_eq!(v["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(v["span_id"], "00f067aa0ba902b7");
        assert_eq!(v["level"], "WARN");
        assert!(got.starts_with("{\"trace_id\""), "{got}");
        assert_eq!(with_ids("not json", &ids), "not json");
    }

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
