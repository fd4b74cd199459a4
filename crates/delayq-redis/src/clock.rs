//! The reference clock of all instances on one Redis: Redis's own `TIME`.
//!
//! Instances on different machines disagree about the wall-clock time by milliseconds to
//! seconds. A task added through one and promoted by another must still never be early, so
//! every instance reads one clock: the `TIME` of the Redis it uses (in a cluster, of the master
//! of slot 0, so all instances ask the same node). Asking Redis on every reading would cost a
//! round trip per operation; instead [`RedisClock`] keeps the reference time as an interval
//! over the local monotonic clock and re-measures it every [`RedisClockOptions::refresh`].
//!
//! # The interval
//!
//! A probe sends `TIME` at local instant `t_send` and gets the answer `T` at `t_recv`. Redis
//! read its clock somewhere in between, so at `t_recv` the reference time lies in
//! `[T, T + (t_recv - t_send) + 1 µs]` (the µs is `TIME`'s truncation). From then on the
//! interval moves with the local monotonic clock and widens on both sides by the drift
//! allowance ([`RedisClockOptions::drift_ppm`]: the two clocks may run at slightly different
//! rates, NTP slewing included). A new probe is intersected with the projected interval, so
//! the bounds only ever get tighter; a probe that does not overlap it means Redis's clock
//! stepped (a failover to another machine, an operator), and the new probe replaces it.
//!
//! Each reading takes the safe side: [`Clock::now_ms`] ("is it due?") is the lower bound
//! rounded down and never goes backwards; [`Clock::due_after`] ("when is `delay_ms` from now?")
//! is the upper bound rounded up plus the delay. So a task is never handed out before its due
//! by Redis's clock, whichever instance added it and whichever promotes it, and never before
//! the producer's send time plus its delay, as long as the producer's clock agrees with Redis.
//! The price is lateness of about one round trip plus the drift allowance since the last probe
//! (see `docs/clock.md` for the figures).
//!
//! # Refusing
//!
//! Before the first probe, and when no probe succeeded within
//! [`RedisClockOptions::max_age`] (Redis down, or every round trip over
//! [`RedisClockOptions::max_rtt`]), the clock cannot bound its error in a way anyone checked,
//! and [`Clock::check`] says so: the queue refuses operations with 503 naming the clock, until
//! a probe succeeds again. Readings taken meanwhile (the promoter's) stay on the safe side of
//! the last interval, widened by the drift allowance: late, never early.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use delayq::clock::{Clock, ClockUnavailable, Sleep, sleep_by_reading, sleep_monotonic};
use delayq_core::Millis;
use parking_lot::Mutex;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;

use crate::conn::{Conn, Link};
use crate::options::RedisOptions;

const NANOS_PER_MS: u64 = 1_000_000;

/// How the reference clock measures Redis's `TIME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisClockOptions {
    /// How often `TIME` is read (default 1 s): one command per interval per instance.
    pub refresh: Duration,
    /// The longest round trip a probe may take to count (default 250 ms): a slower answer
    /// bounds nothing useful and is dropped.
    pub max_rtt: Duration,
    /// How long the clock serves without a successful probe before operations are refused
    /// (default 5 s).
    pub max_age: Duration,
    /// The most the local monotonic clock and Redis's clock may differ in rate, in parts per
    /// million (default 500: the kernel slews a clock by at most 500 ppm, and crystals drift
    /// far less).
    pub drift_ppm: u64,
}

impl Default for RedisClockOptions {
    fn default() -> Self {
        RedisClockOptions {
            refresh: Duration::from_secs(1),
            max_rtt: Duration::from_millis(250),
            max_age: Duration::from_secs(5),
            drift_ppm: 500,
        }
    }
}

impl RedisClockOptions {
    /// Reads `TIME` every `refresh`.
    pub fn refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    /// Refuses operations after `max_age` without a successful probe.
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age;
        self
    }

    /// Drops probes slower than `max_rtt`.
    pub fn max_rtt(mut self, max_rtt: Duration) -> Self {
        self.max_rtt = max_rtt;
        self
    }
}

/// The reference interval: at local instant `t0` (ns since the clock's base) Redis's time was
/// in `[lo0, hi0]` (ns since the epoch).
#[derive(Debug, Clone, Copy)]
struct Interval {
    t0: u64,
    lo0: u64,
    hi0: u64,
}

impl Interval {
    /// The interval at local instant `t`, widened by the drift allowance since `t0`.
    fn at(&self, t: u64, drift_ppm: u64) -> (u64, u64) {
        let dt = t.saturating_sub(self.t0);
        let drift = (dt as u128 * drift_ppm as u128).div_ceil(1_000_000) as u64;
        (
            self.lo0.saturating_add(dt).saturating_sub(drift),
            self.hi0.saturating_add(dt).saturating_add(drift),
        )
    }
}

#[derive(Debug, Default)]
struct State {
    interval: Option<Interval>,
    /// The local instant of the last probe that counted.
    last_ok: Option<u64>,
    /// Why the last probe failed, if it did.
    last_error: Option<String>,
}

struct Inner {
    options: RedisClockOptions,
    base: Instant,
    state: Mutex<State>,
    /// The highest lower bound returned, in ns: readings never go backwards.
    high: AtomicU64,
}

/// Redis's `TIME` as the clock of all instances (see the module doc). Cheap to clone; clones
/// share the measurements.
#[derive(Clone)]
pub struct RedisClock {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClock")
            .field("options", &self.inner.options)
            .field("bounds_ns", &self.bounds_ns())
            .finish()
    }
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
            inner: Arc::new(Inner {
                options,
                base: Instant::now(),
                state: Mutex::new(State::default()),
                high: AtomicU64::new(0),
            }),
        }
    }

    /// Connects to the Redis of `redis` (its own connection, the same deployment as the
    /// backend's) and starts probing `TIME` every [`RedisClockOptions::refresh`], until every
    /// clone of this clock is dropped. Redis need not be reachable yet: the clock refuses until
    /// a probe succeeds. A bad URL is an [`delayq::Error::Invalid`] naming it. Must be called
    /// inside a tokio runtime.
    pub async fn connect(&self, redis: &RedisOptions) -> Result<(), delayq::Error> {
        let link = redis.open_link().await?;
        tokio::spawn(probe_loop(Arc::downgrade(&self.inner), link));
        Ok(())
    }

    /// Waits up to `limit` for the clock to be bounded (the first probe after
    /// [`RedisClock::connect`]); says why not if it is not by then.
    pub async fn wait_bounded(&self, limit: Duration) -> Result<(), ClockUnavailable> {
        let start = Instant::now();
        loop {
            match self.check() {
                Ok(()) => return Ok(()),
                Err(e) if start.elapsed() >= limit => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    /// The reference time now as `(lower, upper)` ns since the epoch, or `None` before the
    /// first probe. The lower bound is not yet held to never going backwards.
    pub fn bounds_ns(&self) -> Option<(u64, u64)> {
        let t = self.local_ns();
        let state = self.inner.state.lock();
        state
            .interval
            .map(|i| i.at(t, self.inner.options.drift_ppm))
    }

    fn local_ns(&self) -> u64 {
        local_ns(&self.inner.base)
    }

    /// The lower bound of now in ns, never going backwards (0 before the first probe).
    fn lower_ns(&self) -> u64 {
        let lo = self.bounds_ns().map_or(0, |(lo, _)| lo);
        self.inner.high.fetch_max(lo, Ordering::Relaxed).max(lo)
    }
}

fn local_ns(base: &Instant) -> u64 {
    u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl Clock for RedisClock {
    fn now_ms(&self) -> Millis {
        self.lower_ns() / NANOS_PER_MS
    }

    fn upper_ms(&self) -> Millis {
        match self.bounds_ns() {
            // After Redis's clock stepped back, readings stand still at the highest lower
            // bound; a window counted from below it would end at once.
            Some((_, hi)) => hi
                .max(self.inner.high.load(Ordering::Relaxed))
                .div_ceil(NANOS_PER_MS),
            // Unbounded: the queue refuses before it gets here (`check`).
            None => self.now_ms(),
        }
    }

    fn check(&self) -> Result<(), ClockUnavailable> {
        let now = self.local_ns();
        let state = self.inner.state.lock();
        let max_age = self.inner.options.max_age;
        let reason = match state.last_ok {
            Some(at) if now.saturating_sub(at) <= max_age.as_nanos() as u64 => return Ok(()),
            None => "no reading of the reference clock (Redis TIME) yet".to_owned(),
            Some(at) => format!(
                "no reading of the reference clock (Redis TIME) within {} ms, the limit is {} ms",
                now.saturating_sub(at) / NANOS_PER_MS,
                max_age.as_millis(),
            ),
        };
        let reason = match &state.last_error {
            Some(e) => format!("{reason}; last error: {e}"),
            None => reason,
        };
        Err(ClockUnavailable { reason })
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let clock = self.clone();
        let deadline_ns = deadline.saturating_mul(NANOS_PER_MS);
        let ppm = self.inner.options.drift_ppm;
        sleep_by_reading(move || {
            let lo = clock.lower_ns();
            // The lower bound advances slower than local time by the drift allowance: sleep
            // that much longer, so one sleep reaches the deadline.
            (lo < deadline_ns).then(|| {
                let gap = deadline_ns - lo;
                let slack = (gap as u128 * ppm as u128).div_ceil(1_000_000) as u64;
                Duration::from_nanos(gap.saturating_add(slack))
            })
        })
    }

    fn sleep_for(&self, duration_ms: u64) -> Sleep {
        sleep_monotonic(duration_ms)
    }
}

async fn probe_loop(inner: Weak<Inner>, link: Link) {
    // Sentinel mode follows the master in the background, as long as this loop runs.
    let (_stop, stopped) = watch::channel(false);
    if let Some(follow) = link.background(stopped) {
        tokio::spawn(follow);
    }
    let addr = link.addr();
    loop {
        let Some(clock) = inner.upgrade() else {
            return;
        };
        let clock = RedisClock { inner: clock };
        let result = probe(&clock, link.conn()).await.map_err(|e| {
            // A Sentinel link asks the sentinels again after a failure.
            link.failed();
            format!("{e} (Redis at {addr})")
        });
        clock.record(result);
        let refresh = clock.inner.options.refresh;
        drop(clock);
        tokio::time::sleep(refresh).await;
    }
}

impl RedisClock {
    /// Takes in the result of a probe.
    fn record(&self, result: Result<(u64, Interval), String>) {
        let mut state = self.inner.state.lock();
        match result {
            Ok((t, interval)) => {
                state.interval = Some(merge(state.interval, interval, t, self.inner.options));
                state.last_ok = Some(t);
                state.last_error = None;
            }
            Err(e) => {
                if state.last_error.is_none() {
                    tracing::warn!(error = %e, "reading the reference clock (Redis TIME) failed");
                }
                state.last_error = Some(e);
            }
        }
    }
}

/// Sends one `TIME` and returns the local instant of the answer and the interval it gives.
async fn probe(clock: &RedisClock, mut conn: Conn) -> Result<(u64, Interval), String> {
    let max_rtt = clock.inner.options.max_rtt;
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
    let rtt = t_recv.saturating_sub(t_send);
    let too_slow = || {
        format!(
            "TIME took over {} ms, the limit of a round trip",
            max_rtt.as_millis()
        )
    };
    let (secs, micros) = match answer {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(format!("TIME failed: {e}")),
        Err(_) => return Err(too_slow()),
    };
    // The timer rounds up; the limit is the measured round trip.
    if u128::from(rtt) > max_rtt.as_nanos() {
        return Err(too_slow());
    }
    let redis_ns = secs
        .saturating_mul(1_000_000_000)
        .saturating_add(micros.saturating_mul(1_000));
    Ok((
        t_recv,
        Interval {
            t0: t_recv,
            lo0: redis_ns,
            // TIME truncates to the µs; the local clock's ns are exact enough.
            hi0: redis_ns.saturating_add(rtt).saturating_add(1_000),
        },
    ))
}

/// The tighter of the old interval (projected to `t`) and the new one, or the new one alone
/// when they do not overlap (Redis's clock stepped).
fn merge(old: Option<Interval>, new: Interval, t: u64, options: RedisClockOptions) -> Interval {
    let Some(old) = old else {
        return new;
    };
    let (lo, hi) = old.at(t, options.drift_ppm);
    let (lo, hi) = (lo.max(new.lo0), hi.min(new.hi0));
    if lo > hi {
        tracing::warn!(
            jump_ms =
                (new.lo0 as i128 - old.at(t, options.drift_ppm).0 as i128) / NANOS_PER_MS as i128,
            "the reference clock (Redis TIME) stepped; following it (never backwards)"
        );
        return new;
    }
    Interval {
        t0: t,
        lo0: lo,
        hi0: hi,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn an_interval_widens_by_the_drift_allowance() {
        let i = Interval {
            t0: 10 * S,
            lo0: 1_000 * S,
            hi0: 1_000 * S + 200_000,
        };
        assert_eq!(i.at(10 * S, 500), (1_000 * S, 1_000 * S + 200_000));
        // One second later: ±500 µs.
        assert_eq!(
            i.at(11 * S, 500),
            (1_001 * S - 500_000, 1_001 * S + 200_000 + 500_000)
        );
    }

    #[test]
    fn probes_narrow_the_interval_and_a_disjoint_one_replaces_it() {
        let options = RedisClockOptions::default();
        let old = Interval {
            t0: 0,
            lo0: 100 * S,
            hi0: 100 * S + 2_000_000,
        };
        // A probe one second later, overlapping on its lower part: the intersection.
        let new = Interval {
            t0: S,
            lo0: 101 * S + 1_000_000,
            hi0: 101 * S + 3_000_000,
        };
        let merged = merge(Some(old), new, S, options);
        assert_eq!(
            (merged.lo0, merged.hi0),
            (101 * S + 1_000_000, 101 * S + 2_500_000)
        );
        // Redis's clock went 10 s back: follow it.
        let stepped = Interval {
            t0: S,
            lo0: 91 * S,
            hi0: 91 * S + 1_000_000,
        };
        let merged = merge(Some(old), stepped, S, options);
        assert_eq!((merged.lo0, merged.hi0), (91 * S, 91 * S + 1_000_000));
    }

    #[test]
    fn an_unconnected_clock_refuses_and_says_why() {
        let clock = RedisClock::default();
        let err = clock.check().unwrap_err();
        assert!(err.reason.contains("Redis TIME"), "{err}");
        assert_eq!(clock.now_ms(), 0);
    }
}
