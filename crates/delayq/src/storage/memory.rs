//! The in-memory backend: the engine with nothing durable behind it. Fast, and everything is
//! gone when the process ends; for tests, and for callers who keep their own durability.

use std::sync::Arc;

use super::StorageContext;
use super::engine::{Engine, NoJournal, Settings, Shard};

/// The in-memory backend.
pub type MemoryStorage = Engine<NoJournal>;

/// Default shard count: enough to spread topics over the cores without many idle drivers.
pub const DEFAULT_SHARDS: usize = 8;

/// Starts an in-memory backend with `shards` shards (at least one). Must be called inside a
/// tokio runtime.
pub fn start(ctx: StorageContext, shards: usize) -> Arc<MemoryStorage> {
    let now = ctx.clock.now_ms();
    let shards = (0..shards.max(1))
        .map(|i| {
            Shard::new(
                now,
                seed(i),
                ctx.defaults,
                ctx.limits.max_error_bytes,
                Arc::clone(&ctx.metrics),
                NoJournal,
            )
        })
        .collect();
    let settings = Settings::new(Default::default(), NoJournal, Arc::clone(&ctx.settings));
    Engine::start(ctx, shards, settings)
}

/// A receipt seed per shard and process, so receipts of different shards and runs differ.
pub(crate) fn seed(shard: usize) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ ((shard as u64) << 56) ^ u64::from(std::process::id()) << 32
}
