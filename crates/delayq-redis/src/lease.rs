//! The lease keeper: which lease buckets (and so which partitions) this instance promotes.
//!
//! Every third of the lease time it runs the `lease` script once: a heartbeat in the live
//! instance set, renewal of the leases it holds up to its fair share
//! (`ceil(buckets / live instances)`), release of those above it, and acquisition of free
//! buckets up to it, each with a new fencing token. One command per round, whatever the
//! number of topics and partitions, so an idle instance sends about three commands a second.
//!
//! An instance that dies stops renewing: its heartbeat and leases run out after the lease
//! time, and the others take its buckets on their next round. One that cannot reach Redis
//! for a lease time drops its buckets itself, so two instances never both believe they
//! hold one for long; the fencing token in each partition refuses a stale holder's tick in
//! any case. A graceful shutdown releases the leases at once.
//!
//! When a tick is fenced off, the promoter reports the bucket and the newer token: the next
//! round gives the bucket up and (if it is still this instance's share) takes it anew, with a
//! token above every fence seen, so promotion heals even if the token counter was lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::BackendError;
use crate::keys::LEASE_BUCKETS;
use crate::promoter::Event;
use crate::scripts::{SCRIPTS, int};
use crate::storage::InstanceState;
use delayq::storage::random_u64;

/// Runs the lease keeper until `stop` turns true, then gives the leases up.
pub(crate) async fn run(state: Arc<InstanceState>, mut stop: watch::Receiver<bool>) {
    let lease = Duration::from_millis(state.options.lease_ms);
    let interval = lease / 3;
    let offset = random_u64() % u64::from(LEASE_BUCKETS);
    let mut held: HashMap<u32, u64> = HashMap::new();
    let mut last_ok = Instant::now();
    let mut failures: u32 = 0;
    loop {
        match round(&state, "tick", offset).await {
            Ok(now_held) => {
                if failures > 0 {
                    tracing::info!(buckets = now_held.len(), "lease keeper reaches Redis again");
                }
                failures = 0;
                last_ok = Instant::now();
                if now_held != held {
                    tracing::debug!(buckets = now_held.len(), "leases changed");
                    held = now_held;
                    let _ = state.promoter.send(Event::Leases(held.clone()));
                }
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures == 1 || failures.is_multiple_of(100) {
                    tracing::warn!(error = %e, failures, "lease round failed");
                }
                if last_ok.elapsed() >= lease && !held.is_empty() {
                    held.clear();
                    let _ = state.promoter.send(Event::Leases(HashMap::new()));
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.changed() => break,
        }
    }
    if let Err(e) = round(&state, "release", offset).await {
        tracing::warn!(error = %e, "releasing leases failed; they run out by themselves");
    }
}

/// One run of the lease script. Returns the buckets held and their tokens.
async fn round(
    state: &InstanceState,
    mode: &str,
    offset: u64,
) -> Result<HashMap<u32, u64>, BackendError> {
    let keys = &state.keys;
    let (floor, fenced) = state.fencing.take();
    let mut inv = SCRIPTS.lease.prepare_invoke();
    inv.key(keys.lease_instances()).key(keys.lease_token());
    for b in 0..LEASE_BUCKETS {
        inv.key(keys.lease_bucket(b));
    }
    inv.arg(&state.instance)
        .arg(state.options.lease_ms)
        .arg(offset)
        .arg(mode)
        .arg(floor);
    for b in &fenced {
        inv.arg(*b);
    }
    let what = "renewing promotion leases";
    let values: Vec<redis::Value> = match state
        .redis
        .io(what, inv.invoke_async(&mut state.redis.conn()))
        .await
    {
        Ok(v) => v,
        Err(e) => {
            // Try again next round.
            state.fencing.report(floor, &fenced);
            return Err(e);
        }
    };
    let nums: Vec<i64> = values.iter().filter_map(int).collect();
    if nums.len() != values.len() || !nums.len().is_multiple_of(2) {
        return Err(BackendError::protocol(what, "odd lease reply"));
    }
    Ok(nums
        .chunks_exact(2)
        .map(|c| (c[0] as u32, c[1] as u64))
        .collect())
}
