//! Export of delayq's own spans over OTLP (docs/tracing.md): off the request path, bounded
//! in memory, dropping (and counting) rather than ever blocking or failing a request.
//!
//! The queue records a finished span by handing it to the SDK, whose only processor here is
//! [`Handoff`]: a `try_send` into a bounded channel, so a request pays a clone and a queue
//! push, never a wait. One task takes the spans out in batches (up to [`BATCH`] spans, or
//! what arrived within [`LINGER`] of the first) and exports each with the official OTLP
//! exporter (protobuf over HTTP, or gRPC). While the collector is down, slow or refusing, the
//! channel fills and new spans are dropped at its door; a failed batch is dropped too. Both
//! are counted in the queue's [`SpanCounters`] (`delayq_spans_dropped_total` in `/metrics`),
//! and the first failure and the recovery are logged once each, not once per batch.

use std::sync::Arc;
use std::time::Duration;

use delayq::spans::{SpanCounters, Spans};
use opentelemetry::Context;
use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    Sampler, SdkTracerProvider, Span, SpanData, SpanExporter as _, SpanProcessor,
};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::ServerError;
use crate::config::{OtlpConfig, OtlpProtocol};

/// Most spans in one export.
const BATCH: usize = 512;

/// How long a batch waits for more spans after its first.
const LINGER: Duration = Duration::from_millis(500);

/// The running exporter: its provider, and the task that exports.
pub(crate) struct Exporter {
    spans: Spans,
    provider: SdkTracerProvider,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exporter").finish_non_exhaustive()
    }
}

/// The span processor: hands each ended span to the export task, or drops it when the
/// channel is full.
#[derive(Debug)]
struct Handoff {
    tx: mpsc::Sender<SpanData>,
    counters: Arc<SpanCounters>,
}

impl SpanProcessor for Handoff {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        // Every span is sampled (`Sampler::AlwaysOn`): what to trace is decided before.
        if self.tx.try_send(span).is_err() {
            self.counters.dropped(1);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        // The export task is stopped by [`Exporter::stop`], which drains the channel.
        Ok(())
    }
}

impl Exporter {
    /// Builds the OTLP exporter `config` asks for and starts the export task. Must be called
    /// inside a tokio runtime (the gRPC channel and the HTTP client live on it).
    pub(crate) fn start(config: &OtlpConfig) -> Result<Exporter, ServerError> {
        let mut exporter = match config.protocol {
            OtlpProtocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(config.endpoint.clone())
                .build(),
            OtlpProtocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(config.endpoint.clone())
                .build(),
        }
        .map_err(|e| ServerError::Otlp {
            endpoint: config.endpoint.clone(),
            reason: e.to_string(),
        })?;
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        exporter.set_resource(&resource);
        let counters = Arc::new(SpanCounters::default());
        let (tx, rx) = mpsc::channel(config.max_queue);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Handoff {
                tx,
                counters: Arc::clone(&counters),
            })
            .with_resource(resource)
            // What to trace is decided before a span is made (`delayq::spans`): a task's
            // sampled flag and the ratio.
            .with_sampler(Sampler::AlwaysOn)
            .build();
        let tracer = provider.tracer("delayq");
        let spans = Spans::to(
            BoxedTracer::new(Box::new(tracer)),
            config.sample_ratio,
            Arc::clone(&counters),
        );
        let (stop, stopped) = watch::channel(false);
        let endpoint = config.endpoint.clone();
        let task = tokio::spawn(run(rx, exporter, counters, stopped, endpoint));
        tracing::info!(endpoint = %config.endpoint, protocol = ?config.protocol, "exporting spans over OTLP");
        Ok(Exporter {
            spans,
            provider,
            stop,
            task,
        })
    }

    /// Where the queue records its spans.
    pub(crate) fn spans(&self) -> Spans {
        self.spans.clone()
    }

    /// Exports what is queued (within `grace`), then stops.
    pub(crate) async fn stop(self, grace: Duration) {
        let _ = self.stop.send(true);
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
        let _ = self.provider.shutdown();
    }
}

/// The export task: batches from the channel, one export at a time, until stopped; then
/// what is left in the channel, once.
async fn run(
    mut rx: mpsc::Receiver<SpanData>,
    exporter: opentelemetry_otlp::SpanExporter,
    counters: Arc<SpanCounters>,
    mut stop: watch::Receiver<bool>,
    endpoint: String,
) {
    let mut failing = false;
    loop {
        let first = tokio::select! {
            span = rx.recv() => span,
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(first) = first else { break };
        let mut batch = vec![first];
        let linger = tokio::time::sleep(LINGER);
        tokio::pin!(linger);
        while batch.len() < BATCH {
            tokio::select! {
                span = rx.recv() => match span {
                    Some(span) => batch.push(span),
                    None => break,
                },
                _ = &mut linger => break,
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        failing = export(&exporter, batch, &counters, failing, &endpoint).await;
        if *stop.borrow() {
            break;
        }
    }
    // Stopping: what is queued goes out in batches, as long as the stop's grace allows.
    rx.close();
    let mut rest = Vec::new();
    while let Ok(span) = rx.try_recv() {
        rest.push(span);
        if rest.len() == BATCH {
            failing = export(
                &exporter,
                std::mem::take(&mut rest),
                &counters,
                failing,
                &endpoint,
            )
            .await;
        }
    }
    if !rest.is_empty() {
        export(&exporter, rest, &counters, failing, &endpoint).await;
    }
    let _ = exporter.shutdown();
}

/// Exports one batch and counts it; logs the first failure of a run of them and the
/// recovery. Returns whether the export failed.
async fn export(
    exporter: &opentelemetry_otlp::SpanExporter,
    batch: Vec<SpanData>,
    counters: &SpanCounters,
    failing: bool,
    endpoint: &str,
) -> bool {
    let n = batch.len() as u64;
    match exporter.export(batch).await {
        Ok(()) => {
            counters.exported(n);
            if failing {
                tracing::info!(%endpoint, "OTLP export works again");
            }
            false
        }
        Err(e) => {
            counters.dropped(n);
            if !failing {
                tracing::warn!(%endpoint, error = %e, spans = n, "OTLP export failed; spans are dropped until it works again");
            }
            true
        }
    }
}
