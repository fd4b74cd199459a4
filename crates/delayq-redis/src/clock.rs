//! The reference clock of all instances on one Redis: Redis's own `TIME`.
//!
//! Instances on different machines disagree about the wall-clock time by milliseconds to
//! seconds. A task added through one and promoted by another must still never be early, so
//! every instance reads one clock: the `TIME` of the Redis it uses (in a cluster, of the master
//! of slot 0, so all instances ask the same node). [`RedisClock`] is a
//! [`ReferenceClock`] (the interval over the local monotonic clock, its safe-side readings
//! and its refusals are described there) fed by a probe of `TIME` every
//! [`RedisClockOptions::refresh`]; `TIME` answers in µs.

use std::time::Duration;

pub use delayq::clock::ReferenceClockOptions as RedisClockOptions;
use delayq::clock::{Clock, ClockUnavailable, ReferenceClock, Sleep, WeakReferenceClock};
use delayq_core::Millis;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use tokio::sync::watch;

use crate::conn::{Conn, Link};
use crate::options::RedisOptions;

/// What the clock reads, in its messages.
const SOURCE: &str = "Redis TIME";

/// Redis's `TIME` as the clock of all instances (see the module doc). Cheap to clone; clones
/// share the measurements.
#[derive(Clone, Debug)]
pub struct RedisClock {
    clock: ReferenceClock,
}

impl Default for RedisClock {
    fn default() -> Self {
        RedisClock::new(RedisClockOptions::default())
    }
}

impl RedisClock {
    /// A clock that knows nothing yet: it refuses until [`RedisClock::connect`] has given it a
    /// Redis to probe and a probe succeeded.
    pub fn new(options: RedisClockOptions) -> Self {
        RedisClock {
            clock: ReferenceClock::new(options, SOURCE),
        }
    }

    /// Connects to the Redis of `redis` (its own connection, the same deployment as the
    /// backend's) and starts probing `TIME` every [`RedisClockOptions::refresh`], until every
    /// clone of this clock is dropped. Redis need not be reachable yet: the clock refuses until
    /// a probe succeeds. A bad URL is an [`delayq::Error::Invalid`] naming it. Must be called
    /// inside a tokio runtime.
    pub async fn connect(&self, redis: &RedisOptions) -> Result<(), delayq::Error> {
        let link = redis.open_link().await?;
        tokio::spawn(probe_loop(self.clock.downgrade(), link));
        Ok(())
    }

    /// Waits up to `limit` for the clock to be bounded (the first probe after
    /// [`RedisClock::connect`]); says why not if it is not by then.
    pub async fn wait_bounded(&self, limit: Duration) -> Result<(), ClockUnavailable> {
        self.clock.wait_bounded(limit).await
    }

    /// The reference time now as `(lower, upper)` ns since the epoch, or `None` before the
    /// first probe. The lower bound is not yet held to never going backwards.
    pub fn bounds_ns(&self) -> Option<(u64, u64)> {
        self.clock.bounds_ns()
    }
}

impl Clock for RedisClock {
    fn now_ms(&self) -> Millis {
        self.clock.now_ms()
    }

    fn upper_ms(&self) -> Millis {
        self.clock.upper_ms()
    }

    fn check(&self) -> Result<(), ClockUnavailable> {
        self.clock.check()
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        self.clock.sleep_until(deadline)
    }

    fn sleep_for(&self, duration_ms: u64) -> Sleep {
        self.clock.sleep_for(duration_ms)
    }
}

async fn probe_loop(clock: WeakReferenceClock, link: Link) {
    // Sentinel mode follows the master in the background, as long as this loop runs.
    let (_stop, stopped) = watch::channel(false);
    if let Some(follow) = link.background(stopped) {
        tokio::spawn(follow);
    }
    let addr = link.addr();
    loop {
        let Some(clock) = clock.upgrade() else {
            return;
        };
        if let Err(e) = probe(&clock, link.conn()).await {
            // A Sentinel link asks the sentinels again after a failure.
            link.failed();
            clock.record_failure(format!("{e} (Redis at {addr})"));
        }
        let refresh = clock.options().refresh;
        drop(clock);
        tokio::time::sleep(refresh).await;
    }
}

/// Sends one `TIME` and records the answer in `clock`.
async fn probe(clock: &ReferenceClock, mut conn: Conn) -> Result<(), String> {
    let max_rtt = clock.options().max_rtt;
    let cmd = redis::cmd("TIME");
    let t_send = clock.local_ns();
    let answer = tokio::time::timeout(max_rtt, async {
        match &mut conn {
            // Every instance asks the same node: the master of slot 0.
            Conn::Cluster(c) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(0, SlotAddr::Master),
                ));
                let value = c.route_command(cmd, route).await?;
                redis::from_redis_value::<(u64, u64)>(value).map_err(redis::RedisError::from)
            }
            other => cmd.query_async::<(u64, u64)>(other).await,
        }
    })
    .await;
    let t_recv = clock.local_ns();
    let (secs, micros) = match answer {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(format!("TIME failed: {e}")),
        Err(_) => return Err(clock.too_slow()),
    };
    let redis_ns = secs
        .saturating_mul(1_000_000_000)
        .saturating_add(micros.saturating_mul(1_000));
    // TIME truncates to the µs.
    clock.record_probe(t_send, t_recv, redis_ns, 1_000);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unconnected_clock_refuses_and_says_why() {
        let clock = RedisClock::default();
        let err = clock.check().unwrap_err();
        assert!(err.reason.contains("Redis TIME"), "{err}");
        assert_eq!(clock.now_ms(), 0);
    }
}
