//! A clock that follows a remote reference (Redis's `TIME`, PostgreSQL's
//! `clock_timestamp()`): the one time all instances of a shared storage judge due times by.
//!
//! Instances on different machines disagree about the wall-clock time by milliseconds to
//! seconds. A task added through one and promoted by another must still never be early, so
//! every instance reads one clock: the storage server's. Asking it on every reading would
//! cost a round trip per operation; instead [`ReferenceClock`] keeps the reference time as an
//! interval over the local monotonic clock, and the backend re-measures it every
//! [`ReferenceClockOptions::refresh`] ([`ReferenceClock::record_probe`]).
//!
//! # The interval
//!
//! A probe is sent at local instant `t_send` and gets the answer `T` at `t_recv`. The server
//! read its clock somewhere in between, so at `t_recv` the reference time lies in
//! `[T, T + (t_recv - t_send) + resolution]` (the resolution is the answer's truncation, 1 µs
//! for both servers). From then on the interval moves with the local monotonic clock and
//! widens on both sides by the drift allowance ([`ReferenceClockOptions::drift_ppm`]: the two
//! clocks may run at slightly different rates, NTP slewing included). A new probe is
//! intersected with the projected interval, so the bounds only ever get tighter; a probe that
//! does not overlap it means the server's clock stepped (a failover to another machine, an
//! operator), and the new probe replaces it.
//!
//! Each reading takes the safe side: [`Clock::now_ms`] ("is it due?") is the lower bound
//! rounded down and never goes backwards; [`Clock::due_after`] ("when is `delay_ms` from now?")
//! is the upper bound rounded up plus the delay. So a task is never handed out before its due
//! by the reference clock, whichever instance added it and whichever promotes it. The price is
//! lateness of about one round trip plus the drift allowance since the last probe (see
//! `docs/clock.md` for the figures).
//!
//! # Refusing
//!
//! Before the first probe, and when no probe succeeded within
//! [`ReferenceClockOptions::max_age`] (the server down, or every round trip over
//! [`ReferenceClockOptions::max_rtt`]), the clock cannot bound its error in a way anyone
//! checked, and [`Clock::check`] says so: the queue refuses operations with 503 naming the
//! clock, until a probe succeeds again. Readings taken meanwhile (the promoter's) stay on the
//! safe side of the last interval, widened by the drift allowance: late, never early.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use delayq_core::Millis;
use parking_lot::Mutex;

use super::{Clock, ClockUnavailable, NANOS_PER_MS, Sleep, sleep_by_reading, sleep_monotonic};

/// How a reference clock measures the server's time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReferenceClockOptions {
    /// How often the time is read (default 1 s): one command per interval per instance.
    pub refresh: Duration,
    /// The longest round trip a probe may take to count (default 250 ms): a slower answer
    /// bounds nothing useful and is dropped.
    pub max_rtt: Duration,
    /// How long the clock serves without a successful probe before operations are refused
    /// (default 5 s).
    pub max_age: Duration,
    /// The most the local monotonic clock and the server's clock may differ in rate, in parts
    /// per million (default 500: the kernel slews a clock by at most 500 ppm, and crystals
    /// drift far less).
    pub drift_ppm: u64,
}

impl Default for ReferenceClockOptions {
    fn default() -> Self {
        ReferenceClockOptions {
            refresh: Duration::from_secs(1),
            max_rtt: Duration::from_millis(250),
            max_age: Duration::from_secs(5),
            drift_ppm: 500,
        }
    }
}

impl ReferenceClockOptions {
    /// Reads the time every `refresh`.
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

/// The reference interval: at local instant `t0` (ns since the clock's base) the reference
/// time was in `[lo0, hi0]` (ns since the epoch).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Interval {
    pub(crate) t0: u64,
    pub(crate) lo0: u64,
    pub(crate) hi0: u64,
}

impl Interval {
    /// The interval at local instant `t`, widened by the drift allowance since `t0`.
    pub(crate) fn at(&self, t: u64, drift_ppm: u64) -> (u64, u64) {
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
    options: ReferenceClockOptions,
    /// What the clock reads, for messages ("Redis TIME").
    source: &'static str,
    base: Instant,
    state: Mutex<State>,
    /// The highest lower bound returned, in ns: readings never go backwards.
    high: AtomicU64,
}

/// A remote reference time as a [`Clock`] (see the module doc). Cheap to clone; clones share
/// the measurements. The backend that owns the connection probes it.
#[derive(Clone)]
pub struct ReferenceClock {
    inner: Arc<Inner>,
}

/// A handle of a [`ReferenceClock`] that does not keep it alive: a probe loop holds one and
/// stops once every clone of the clock is gone.
#[derive(Clone)]
pub struct WeakReferenceClock {
    inner: Weak<Inner>,
}

impl WeakReferenceClock {
    /// The clock, while a clone of it lives.
    pub fn upgrade(&self) -> Option<ReferenceClock> {
        self.inner.upgrade().map(|inner| ReferenceClock { inner })
    }
}

impl std::fmt::Debug for ReferenceClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReferenceClock")
            .field("source", &self.inner.source)
            .field("options", &self.inner.options)
            .field("bounds_ns", &self.bounds_ns())
            .finish()
    }
}

impl ReferenceClock {
    /// A clock of `source` (named in messages, e.g. "Redis TIME") that knows nothing yet: it
    /// refuses until a probe was recorded.
    pub fn new(options: ReferenceClockOptions, source: &'static str) -> Self {
        ReferenceClock {
            inner: Arc::new(Inner {
                options,
                source,
                base: Instant::now(),
                state: Mutex::new(State::default()),
                high: AtomicU64::new(0),
            }),
        }
    }

    /// The options.
    pub fn options(&self) -> ReferenceClockOptions {
        self.inner.options
    }

    /// A handle that does not keep the clock alive.
    pub fn downgrade(&self) -> WeakReferenceClock {
        WeakReferenceClock {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// Waits up to `limit` for the clock to be bounded (the first probe); says why not if it
    /// is not by then.
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

    /// The local monotonic instant in ns since the clock's base: a probe reads it just
    /// before sending and just after the answer.
    pub fn local_ns(&self) -> u64 {
        u64::try_from(self.inner.base.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The lower bound of now in ns, never going backwards (0 before the first probe).
    fn lower_ns(&self) -> u64 {
        let lo = self.bounds_ns().map_or(0, |(lo, _)| lo);
        self.inner.high.fetch_max(lo, Ordering::Relaxed).max(lo)
    }

    /// Takes in a probe sent at local `t_send` and answered at `t_recv` with the server's
    /// time `remote_ns` (ns since the epoch, truncated to `resolution_ns`). A round trip over
    /// [`ReferenceClockOptions::max_rtt`] does not count and is recorded as a failure.
    pub fn record_probe(&self, t_send: u64, t_recv: u64, remote_ns: u64, resolution_ns: u64) {
        let rtt = t_recv.saturating_sub(t_send);
        let max_rtt = self.inner.options.max_rtt;
        if u128::from(rtt) > max_rtt.as_nanos() {
            self.record_failure(self.too_slow());
            return;
        }
        let interval = Interval {
            t0: t_recv,
            lo0: remote_ns,
            hi0: remote_ns.saturating_add(rtt).saturating_add(resolution_ns),
        };
        let mut state = self.inner.state.lock();
        state.interval = Some(merge(
            state.interval,
            interval,
            t_recv,
            self.inner.options,
            self.inner.source,
        ));
        state.last_ok = Some(t_recv);
        state.last_error = None;
    }

    /// The message of a probe that took longer than a round trip may.
    pub fn too_slow(&self) -> String {
        format!(
            "{} took over {} ms, the limit of a round trip",
            self.inner.source,
            self.inner.options.max_rtt.as_millis()
        )
    }

    /// Records a probe that failed (logged once per run of failures).
    pub fn record_failure(&self, error: String) {
        let mut state = self.inner.state.lock();
        if state.last_error.is_none() {
            tracing::warn!(error = %error, "reading the reference clock ({}) failed", self.inner.source);
        }
        state.last_error = Some(error);
    }
}

impl Clock for ReferenceClock {
    fn now_ms(&self) -> Millis {
        self.lower_ns() / NANOS_PER_MS
    }

    fn upper_ms(&self) -> Millis {
        match self.bounds_ns() {
            // After the server's clock stepped back, readings stand still at the highest
            // lower bound; a window counted from below it would end at once.
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
        let source = self.inner.source;
        let reason = match state.last_ok {
            Some(at) if now.saturating_sub(at) <= max_age.as_nanos() as u64 => return Ok(()),
            None => format!("no reading of the reference clock ({source}) yet"),
            Some(at) => format!(
                "no reading of the reference clock ({source}) within {} ms, the limit is {} ms",
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

/// The tighter of the old interval (projected to `t`) and the new one, or the new one alone
/// when they do not overlap (the server's clock stepped).
fn merge(
    old: Option<Interval>,
    new: Interval,
    t: u64,
    options: ReferenceClockOptions,
    source: &str,
) -> Interval {
    let Some(old) = old else {
        return new;
    };
    let (lo, hi) = old.at(t, options.drift_ppm);
    let (lo, hi) = (lo.max(new.lo0), hi.min(new.hi0));
    if lo > hi {
        tracing::warn!(
            jump_ms =
                (new.lo0 as i128 - old.at(t, options.drift_ppm).0 as i128) / NANOS_PER_MS as i128,
            "the reference clock ({source}) stepped; following it (never backwards)"
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
        let options = ReferenceClockOptions::default();
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
        let merged = merge(Some(old), new, S, options, "test");
        assert_eq!(
            (merged.lo0, merged.hi0),
            (101 * S + 1_000_000, 101 * S + 2_500_000)
        );
        // The server's clock went 10 s back: follow it.
        let stepped = Interval {
            t0: S,
            lo0: 91 * S,
            hi0: 91 * S + 1_000_000,
        };
        let merged = merge(Some(old), stepped, S, options, "test");
        assert_eq!((merged.lo0, merged.hi0), (91 * S, 91 * S + 1_000_000));
    }

    #[test]
    fn an_unprobed_clock_refuses_and_says_why() {
        let clock = ReferenceClock::new(ReferenceClockOptions::default(), "Redis TIME");
        let err = clock.check().unwrap_err();
        assert!(err.reason.contains("Redis TIME"), "{err}");
        assert_eq!(clock.now_ms(), 0);
    }

    #[test]
    fn a_probe_bounds_the_clock_and_a_slow_one_does_not_count() {
        let clock = ReferenceClock::new(ReferenceClockOptions::default(), "test TIME");
        clock.record_probe(0, 1_000_000, 100 * S, 1_000);
        assert!(clock.check().is_ok());
        let (lo, hi) = clock.bounds_ns().unwrap();
        assert!(lo >= 100 * S && hi >= lo + 1_001_000, "{lo} {hi}");
        let slow = ReferenceClock::new(ReferenceClockOptions::default(), "test TIME");
        slow.record_probe(0, S, 100 * S, 1_000);
        let err = slow.check().unwrap_err();
        assert!(err.reason.contains("round trip"), "{err}");
    }
}
