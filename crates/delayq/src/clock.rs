//! Clocks: where "now" comes from, how a delay becomes a due time, and how to wait.
//!
//! Everything in delayq that waits reads a clock and sleeps until an absolute instant; nothing
//! counts ticks (docs/design.md §2 rule 12), so a late wake-up never accumulates into drift.
//!
//! # Two readings, rounded to the safe side
//!
//! Due times are whole epoch milliseconds, the clocks behind them are finer, and a clock may
//! only know the time within an interval (the Redis reference clock). So a clock answers two
//! different questions, each rounded the safe way for rule 1 (never early):
//!
//! - [`Clock::now_ms`], "is it due yet?": the *lower* bound of now, rounded *down*. A task due
//!   at `d` is handed out once `now_ms() >= d`, that is once the true time has passed the start
//!   of millisecond `d`.
//! - [`Clock::due_after`], "when is `delay_ms` from now?": the *upper* bound of now, rounded
//!   *up*, plus the delay. A producer that sent its request at wall time `s` gets a due of at
//!   least `floor(s) + delay_ms`, and its task is never handed out before `s + delay_ms`.
//!   A delay of 0 means "now" and reads [`Clock::now_ms`], so such a task is ready at once.
//!
//! # The system clock
//!
//! [`SystemClock`] follows the wall clock (so a restarted process, and another process on the
//! same machine, agree with it), in nanoseconds, rounding once per reading. It never goes
//! backwards inside a process: when the wall clock steps back, time stands still until the
//! wall clock has caught up (tasks come late, never early); when it steps forward, what is
//! now due fires. [`Clock::sleep_until`] sleeps in chunks of at most [`MAX_SLEEP`] and reads the
//! clock again after each, so a forward step is noticed within a second while an idle process
//! still sleeps (one wake-up a second per sleeper). A span of time, such as a long-poll's
//! timeout, is measured on the monotonic clock instead ([`Clock::sleep_for`]). NTP *slewing* (the kernel running the
//! clock up to 0.05 % fast or slow to correct an offset) is followed as it happens: due times
//! are wall-clock instants, so a slewed second is simply a slightly longer or shorter second.
//! See `docs/clock.md`.
//!
//! [`ReferenceClock`] follows a storage server's time (Redis `TIME`, PostgreSQL
//! `clock_timestamp()`) as an interval over the local monotonic clock, for the instances that
//! share that storage ([`reference`](mod@reference)).
//!
//! [`ManualClock`] only moves when a test moves it, so time-dependent rules can be tested
//! exactly and instantly; [`ManualWall`] is a wall-time source a test can step, to test
//! [`SystemClock`] itself.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayq_core::Millis;
use tokio::sync::watch;

pub mod reference;

pub use reference::{ReferenceClock, ReferenceClockOptions, WeakReferenceClock};

/// A boxed future, as the clock returns it (clocks are used as trait objects).
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The longest a real clock sleeps before it reads the time again: a forward step of the wall
/// clock (or of the Redis reference) is noticed within this.
pub const MAX_SLEEP: Duration = Duration::from_secs(1);

const NANOS_PER_MS: u64 = 1_000_000;

/// Why a clock cannot say what time it is within known bounds (the Redis reference clock
/// without a recent reading). Operations are refused with it (HTTP 503).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct ClockUnavailable {
    /// What is wrong, e.g. "no reading of Redis TIME for 6.0 s (last error: ...)".
    pub reason: String,
}

/// A source of epoch-millisecond time that can also wait for an instant.
pub trait Clock: Send + Sync + 'static {
    /// The current time in epoch milliseconds: the lower bound of now, rounded down. A task
    /// due at `d` may be handed out once this is `>= d`. Never goes backwards.
    fn now_ms(&self) -> Millis;

    /// The upper bound of now in epoch milliseconds, rounded up: the moment from which a
    /// window given to a consumer (a delay, a ttr, a backoff) is counted, so that the window
    /// never ends before the true time plus its length. Never below [`Clock::now_ms`] read
    /// before it; exact clocks give the same as `now_ms()`.
    fn upper_ms(&self) -> Millis {
        self.now_ms()
    }

    /// The moment a window handed to a consumer starts from (the ttr of a pop or a touch, the
    /// backoff or delay of a release), in an operation that read `now` (the lower reading,
    /// which decides what is due): [`Clock::upper_ms`], read after it. A window measured from
    /// `now` could end up to a millisecond before the consumer's own clock says it should,
    /// and a second consumer would get the task while the first still holds a valid receipt;
    /// from the upper bound it is at most a millisecond late, never early.
    fn window_start(&self, now: Millis) -> Millis {
        self.upper_ms().max(now)
    }

    /// The due time of something `delay_ms` from now: [`Clock::upper_ms`] plus `delay_ms`
    /// (saturating). A delay of 0 is [`Clock::now_ms`], so such a task is ready at once.
    fn due_after(&self, delay_ms: u64) -> Millis {
        if delay_ms == 0 {
            return self.now_ms();
        }
        self.upper_ms().saturating_add(delay_ms)
    }

    /// Whether the clock's readings are within known bounds right now. A clock that cannot
    /// bound them (the Redis reference clock without a recent reading) says why, and the
    /// queue refuses operations until it can. Exact clocks always can.
    fn check(&self) -> Result<(), ClockUnavailable> {
        Ok(())
    }

    /// A future that completes once `now_ms() >= deadline`.
    fn sleep_until(&self, deadline: Millis) -> Sleep;

    /// A future that completes after `duration_ms`: a span of time (a long-poll's timeout),
    /// not a moment. Real clocks measure it on the monotonic clock, so a step of the wall
    /// clock neither cuts a long-poll short nor holds it for the length of the step; a test
    /// clock measures it on its own time.
    fn sleep_for(&self, duration_ms: u64) -> Sleep {
        self.sleep_until(self.now_ms().saturating_add(duration_ms))
    }
}

/// The monotonic sleep of real clocks' [`Clock::sleep_for`].
pub fn sleep_monotonic(duration_ms: u64) -> Sleep {
    Box::pin(tokio::time::sleep(Duration::from_millis(duration_ms)))
}

/// Sleeps until `remaining` says the deadline is reached (`None`), waking at least every
/// [`MAX_SLEEP`] to ask again, so a step of the clock behind `remaining` is followed within
/// that. `remaining` answers how long until the deadline as the clock reads it now.
///
/// This is the sleep of every real clock: sleeping on the monotonic clock alone would miss a
/// forward step of the wall clock for as long as the sleep lasts.
pub fn sleep_by_reading(remaining: impl Fn() -> Option<Duration> + Send + 'static) -> Sleep {
    Box::pin(async move {
        // A wake-up that comes early (timer rounding) reads again and goes back to sleep.
        while let Some(left) = remaining() {
            tokio::time::sleep(left.min(MAX_SLEEP)).await;
        }
    })
}

/// Where a [`SystemClock`] reads the wall-clock time: the operating system's, or one a test
/// controls ([`ManualWall`], [`SkewedWall`]).
pub trait WallTime: Send + Sync + 'static {
    /// Nanoseconds since the Unix epoch. May jump backwards or forwards (a step).
    fn now_ns(&self) -> u64;
}

/// The operating system's wall clock (`SystemTime::now`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemWall;

impl WallTime for SystemWall {
    fn now_ns(&self) -> u64 {
        // Before 1970 (a broken clock) reads as the epoch; past 2554 saturates.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// The operating system's wall clock shifted by a fixed amount, to simulate a machine whose
/// clock is off (tests of several instances on one machine).
#[derive(Debug, Clone, Copy)]
pub struct SkewedWall {
    skew_ns: i64,
}

impl SkewedWall {
    /// The system's wall clock plus `skew_ms` (negative: behind).
    pub fn new(skew_ms: i64) -> Self {
        SkewedWall {
            skew_ns: skew_ms.saturating_mul(NANOS_PER_MS as i64),
        }
    }
}

impl WallTime for SkewedWall {
    fn now_ns(&self) -> u64 {
        SystemWall.now_ns().saturating_add_signed(self.skew_ns)
    }
}

/// The operating system's wall clock shifted by a number of milliseconds read from a file, so
/// a test can step the wall clock of a running binary by writing the file. The file is read
/// again at most every 10 ms; a missing or unreadable file means no shift.
#[derive(Debug)]
pub struct SkewFileWall {
    path: std::path::PathBuf,
    /// When the file was last read (monotonic), and the shift it gave in ns.
    cached: parking_lot::Mutex<Option<(std::time::Instant, i64)>>,
}

impl SkewFileWall {
    /// A wall clock shifted by the milliseconds written in `path`.
    pub fn new(path: impl Into<std::path::PathBuf>) -> Self {
        SkewFileWall {
            path: path.into(),
            cached: parking_lot::Mutex::new(None),
        }
    }

    fn skew_ns(&self) -> i64 {
        let mut cached = self.cached.lock();
        match *cached {
            Some((at, skew)) if at.elapsed() < Duration::from_millis(10) => skew,
            _ => {
                let skew_ms: i64 = std::fs::read_to_string(&self.path)
                    .ok()
                    .and_then(|text| text.trim().parse().ok())
                    .unwrap_or(0);
                let skew = skew_ms.saturating_mul(NANOS_PER_MS as i64);
                *cached = Some((std::time::Instant::now(), skew));
                skew
            }
        }
    }
}

impl WallTime for SkewFileWall {
    fn now_ns(&self) -> u64 {
        SystemWall.now_ns().saturating_add_signed(self.skew_ns())
    }
}

/// A wall-time source that moves only when a test sets it, in nanoseconds, also backwards.
#[derive(Debug, Clone, Default)]
pub struct ManualWall {
    ns: Arc<AtomicU64>,
}

impl ManualWall {
    /// A wall clock standing at `ns` nanoseconds since the epoch.
    pub fn new(ns: u64) -> Self {
        ManualWall {
            ns: Arc::new(AtomicU64::new(ns)),
        }
    }

    /// Sets the wall clock to `ns`, forwards or backwards (a step).
    pub fn set_ns(&self, ns: u64) {
        self.ns.store(ns, Ordering::SeqCst);
    }

    /// Moves the wall clock by `delta_ns`, forwards or backwards.
    pub fn step_ns(&self, delta_ns: i64) {
        let _ = self
            .ns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |ns| {
                Some(ns.saturating_add_signed(delta_ns))
            });
    }
}

impl WallTime for ManualWall {
    fn now_ns(&self) -> u64 {
        self.ns.load(Ordering::SeqCst)
    }
}

/// The real clock: the wall clock in nanoseconds, whose milliseconds never go backwards (see
/// the module doc).
///
/// Clones share the high-water mark, so all of a queue's readings are monotonic together.
#[derive(Clone)]
pub struct SystemClock {
    wall: Arc<dyn WallTime>,
    /// The latest wall time read, in whole ms: a reading below it (a backward step) reads as
    /// it. Whole ms, so that readers on many threads write it once a millisecond, not on
    /// every reading (a shared write per reading costs hundreds of ns under contention).
    high_ms: Arc<AtomicU64>,
}

impl std::fmt::Debug for SystemClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SystemClock")
            .field("high_ms", &self.high_ms.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SystemClock {
    /// A clock on the operating system's wall clock.
    pub fn new() -> Self {
        SystemClock::with_wall(Arc::new(SystemWall))
    }

    /// A clock on the given wall-time source (a test's [`ManualWall`], a [`SkewedWall`]).
    pub fn with_wall(wall: Arc<dyn WallTime>) -> Self {
        let clock = SystemClock {
            wall,
            high_ms: Arc::new(AtomicU64::new(0)),
        };
        clock.now_ns();
        clock
    }

    /// Now in nanoseconds since the epoch: the wall clock, or the start of the latest
    /// millisecond read if the wall clock went back since. Its whole milliseconds never go
    /// backwards.
    pub fn now_ns(&self) -> u64 {
        let wall = self.wall.now_ns();
        let ms = wall / NANOS_PER_MS;
        let high = self.high_ms.load(Ordering::Relaxed);
        if ms > high {
            // Another reader may move the mark further meanwhile: the larger value wins.
            let before = self.high_ms.fetch_max(ms, Ordering::Relaxed);
            if before > ms {
                return before.saturating_mul(NANOS_PER_MS);
            }
            return wall;
        }
        if ms < high {
            return high.saturating_mul(NANOS_PER_MS);
        }
        wall
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        self.now_ns() / NANOS_PER_MS
    }

    fn upper_ms(&self) -> Millis {
        self.now_ns().div_ceil(NANOS_PER_MS)
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let clock = self.clone();
        let deadline_ns = deadline.saturating_mul(NANOS_PER_MS);
        sleep_by_reading(move || {
            let now = clock.now_ns();
            (now < deadline_ns).then(|| Duration::from_nanos(deadline_ns - now))
        })
    }

    fn sleep_for(&self, duration_ms: u64) -> Sleep {
        sleep_monotonic(duration_ms)
    }
}

/// A clock that moves only when told to, for tests.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<watch::Sender<Millis>>,
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: Millis) -> Self {
        ManualClock {
            now: Arc::new(watch::Sender::new(now_ms)),
        }
    }

    /// Moves the clock forward by `ms` and wakes everything sleeping until then.
    pub fn advance(&self, ms: u64) {
        self.now.send_modify(|now| *now = now.saturating_add(ms));
    }

    /// Sets the clock to `now_ms` (never backwards: an earlier value is ignored).
    pub fn set(&self, now_ms: Millis) {
        self.now.send_modify(|now| *now = (*now).max(now_ms));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as any ManualClock clone; if all are gone, time stops.
            let _ = rx.wait_for(|now| *now >= deadline).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = NANOS_PER_MS;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_when_advanced() {
        let clock = ManualClock::new(1_000);
        let sleeper = tokio::spawn(clock.sleep_until(1_050));
        tokio::task::yield_now().await;
        clock.advance(49);
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(1);
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("sleeper woke")
            .unwrap();
        clock.set(10);
        assert_eq!(clock.now_ms(), 1_050, "never backwards");
    }

    #[tokio::test]
    async fn system_clock_sleep_is_never_early() {
        let clock = SystemClock::new();
        for delay in [0, 1, 3, 7] {
            let deadline = clock.now_ms() + delay;
            clock.sleep_until(deadline).await;
            assert!(clock.now_ms() >= deadline);
        }
    }

    /// The bug of issue 9: a process started at x.999 ms must neither lag (floor the anchor,
    /// then floor the elapsed time again) nor hand out a due below floor(send) + delay.
    #[test]
    fn a_start_at_the_end_of_a_millisecond_does_not_lag() {
        let wall = ManualWall::new(1_000 * MS + 999_999);
        let clock = SystemClock::with_wall(Arc::new(wall.clone()));
        assert_eq!(clock.now_ms(), 1_000);
        // 0.002 ms later the wall clock is at 1001.000001: the clock says 1001, not 1000.
        wall.step_ns(2_000);
        assert_eq!(clock.now_ms(), 1_001);
        // 1.5 ms later (1002.500001), the real elapsed time counts, not two floored parts.
        wall.step_ns(1_500_000);
        assert_eq!(clock.now_ms(), 1_002);
        assert_eq!(clock.due_after(10), 1_013, "1002.5 + 10 rounded up");
        assert_eq!(clock.due_after(0), 1_002, "a delay of 0 is due now");
    }

    #[test]
    fn due_after_is_never_below_the_wall_time_plus_the_delay() {
        // Table: the wall time in ns, a delay, the due.
        let cases: &[(u64, u64, Millis)] = &[
            (5 * MS, 7, 12),              // exactly on a millisecond: nothing to round
            (5 * MS + 1, 7, 13),          // just after it: round up
            (5 * MS + MS - 1, 7, 13),     // x.999999
            (5 * MS + 1, 0, 5),           // a delay of 0 is now
            (5 * MS, u64::MAX, u64::MAX), // saturates, never wraps
        ];
        for &(ns, delay, due) in cases {
            let clock = SystemClock::with_wall(Arc::new(ManualWall::new(ns)));
            assert_eq!(clock.due_after(delay), due, "wall {ns} ns, delay {delay}");
            // The promise of the module doc: due ms is at or after the wall time + delay.
            if delay > 0 && delay < u64::MAX {
                assert!(u128::from(due) * u128::from(MS) >= u128::from(ns + delay * MS));
            }
        }
    }

    #[test]
    fn a_backward_step_makes_time_stand_still_until_the_wall_catches_up() {
        let wall = ManualWall::new(10_000 * MS + 400_000);
        let clock = SystemClock::with_wall(Arc::new(wall.clone()));
        assert_eq!(clock.now_ms(), 10_000);
        wall.step_ns(-(5_000 * MS as i64));
        assert_eq!(clock.now_ms(), 10_000, "stands still");
        assert_eq!(
            clock.due_after(3),
            10_003,
            "a due from the kept millisecond"
        );
        wall.step_ns(4_999 * MS as i64);
        assert_eq!(clock.now_ms(), 10_000, "still behind the latest reading");
        wall.step_ns(2 * MS as i64);
        assert_eq!(clock.now_ms(), 10_001, "follows again once caught up");
    }

    #[tokio::test(start_paused = true)]
    async fn a_sleeper_does_not_wake_on_a_backward_step_and_wakes_on_a_forward_one() {
        let wall = ManualWall::new(50_000 * MS);
        let clock = SystemClock::with_wall(Arc::new(wall.clone()));
        // Due in an hour by the wall clock.
        let sleeper = tokio::spawn(clock.sleep_until(50_000 + 3_600_000));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!sleeper.is_finished());
        wall.step_ns(-(60_000 * MS as i64));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!sleeper.is_finished(), "a backward step wakes nothing");
        // Forward past the deadline: noticed within one chunk, not after an hour.
        wall.set_ns((50_000 + 3_600_000) * MS);
        tokio::time::sleep(MAX_SLEEP + Duration::from_millis(1)).await;
        tokio::task::yield_now().await;
        assert!(sleeper.is_finished(), "a forward step fires what is due");
    }

    #[test]
    fn a_skewed_wall_is_the_system_wall_shifted() {
        let ahead = SkewedWall::new(2_000).now_ns();
        let system = SystemWall.now_ns();
        let behind = SkewedWall::new(-2_000).now_ns();
        assert!(ahead > system + 1_900 * MS && ahead < system + 2_100 * MS);
        assert!(behind + 1_900 * MS < system && behind + 2_100 * MS > system);
    }
}
