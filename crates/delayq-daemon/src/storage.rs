//! The storage backend: the one place that picks it ([`build_queue`]).

use std::sync::Arc;
use std::time::Duration;

use delayq::metrics::Metrics;
use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{Queue, Spans, StorageContext, SystemClock};
use delayq_postgres::PostgresOptions;
use delayq_postgres::clock::PostgresClockOptions;
use delayq_redis::{RedisClock, RedisOptions};

use crate::ServerError;
use crate::config::{ServerConfig, StorageConfig};

/// Builds the queue the configuration asks for. This is the one place that picks the storage
/// backend. Must be called inside a tokio runtime. (Async because opening a durable backend
/// recovers its data first.)
pub async fn build_queue(config: &ServerConfig) -> Result<Queue, ServerError> {
    build_queue_with(config, Spans::off()).await
}

/// [`build_queue`], recording the spans of traced tasks to `spans`.
pub(crate) async fn build_queue_with(
    config: &ServerConfig,
    spans: Spans,
) -> Result<Queue, ServerError> {
    let mut ctx = StorageContext::new(Arc::new(system_clock()))
        .with_limits(config.limits.clone())
        .with_defaults(config.defaults);
    ctx.metrics = Arc::new(Metrics::with_spans(spans));
    match &config.storage {
        StorageConfig::Memory => Ok(Queue::memory_with(ctx)),
        StorageConfig::Embedded { data_dir, fsync } => {
            let options = EmbeddedOptions::new(data_dir.clone()).fsync(*fsync);
            let (storage, _) = embedded::start(ctx.clone(), options)
                .await
                .map_err(|source| ServerError::Storage {
                    op: "opening the embedded storage",
                    source,
                })?;
            Ok(Queue::new(storage, ctx))
        }
        StorageConfig::Redis { url } => redis_queue(config, url, ctx).await,
        StorageConfig::Postgres {
            url,
            schema,
            pool_size,
        } => {
            let options = PostgresOptions::new(url.clone())
                .schema(schema.clone())
                .pool_size(*pool_size as usize);
            postgres_queue(options, ctx).await
        }
    }
}

/// A queue on PostgreSQL, on the database's clock.
async fn postgres_queue(
    options: PostgresOptions,
    mut ctx: StorageContext,
) -> Result<Queue, ServerError> {
    // All instances read one clock, the database's clock_timestamp() (docs/clock.md).
    let clock = delayq_postgres::clock::new_clock(PostgresClockOptions::default());
    delayq_postgres::clock::connect(&clock, &options).map_err(|source| ServerError::Storage {
        op: "connecting the reference clock to PostgreSQL",
        source,
    })?;
    ctx.clock = Arc::new(clock.clone());
    let storage = delayq_postgres::start(ctx.clone(), options)
        .await
        .map_err(|source| ServerError::Storage {
            op: "connecting to PostgreSQL",
            source,
        })?;
    if let Err(e) = clock.wait_bounded(Duration::from_secs(2)).await {
        tracing::warn!(error = %e, "the reference clock is not bounded yet; requests get 503 until it is");
    }
    Ok(Queue::new(Arc::new(storage), ctx))
}

/// A queue on Redis at `url`, on Redis's clock.
async fn redis_queue(
    config: &ServerConfig,
    url: &str,
    mut ctx: StorageContext,
) -> Result<Queue, ServerError> {
    let mut options = RedisOptions::new(url.to_owned());
    if let Some(partitions) = config.redis_partitions {
        options = options.partitions(partitions);
    }
    if config.redis_wait_replicas > 0 {
        options = options.wait_replicas(
            config.redis_wait_replicas,
            Duration::from_millis(config.redis_wait_timeout_ms),
        );
    }
    // All instances read one clock, Redis's TIME (docs/clock.md).
    let clock = RedisClock::default();
    clock
        .connect(&options)
        .await
        .map_err(|source| ServerError::Storage {
            op: "connecting the reference clock to Redis",
            source,
        })?;
    ctx.clock = Arc::new(clock.clone());
    let storage = delayq_redis::start(ctx.clone(), options)
        .await
        .map_err(|source| ServerError::Storage {
            op: "connecting to Redis",
            source,
        })?;
    if let Err(e) = clock.wait_bounded(Duration::from_secs(2)).await {
        tracing::warn!(error = %e, "the reference clock is not bounded yet; requests get 503 until it is");
    }
    Ok(Queue::new(storage, ctx))
}

/// The clock of an embedded or in-memory server: the system's wall clock. A debug build (the
/// tests') shifts it by `DELAYQ_TEST_WALL_SKEW_MS` when set (instances whose clocks disagree
/// on one machine), or by the milliseconds written in the file `DELAYQ_TEST_WALL_SKEW_FILE`
/// (a test steps the clock of the running server); a release build ignores both.
fn system_clock() -> SystemClock {
    #[cfg(debug_assertions)]
    {
        use delayq::clock::{SkewFileWall, SkewedWall};
        if let Some(skew) = std::env::var("DELAYQ_TEST_WALL_SKEW_MS")
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
        {
            tracing::warn!(skew_ms = skew, "test build: the wall clock is skewed");
            return SystemClock::with_wall(Arc::new(SkewedWall::new(skew)));
        }
        if let Some(path) = std::env::var_os("DELAYQ_TEST_WALL_SKEW_FILE") {
            tracing::warn!(?path, "test build: the wall clock is skewed by a file");
            return SystemClock::with_wall(Arc::new(SkewFileWall::new(path)));
        }
    }
    SystemClock::new()
}
