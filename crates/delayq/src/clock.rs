//! Clocks: where "now" comes from, and how to wait for a moment.
//!
//! Everything in delayq that waits reads a clock and sleeps until an absolute instant; nothing
//! counts ticks (DESIGN §2 rule 12), so a late wake-up never accumulates into drift.
//! [`SystemClock`] is the real one; [`ManualClock`] only moves when a test moves it, so
//! time-dependent rules can be tested exactly and instantly.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use delayq_core::Millis;
use tokio::sync::watch;

/// A boxed future, as the clock returns it (clocks are used as trait objects).
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of epoch-millisecond time that can also wait for an instant.
pub trait Clock: Send + Sync + 'static {
    /// The current time in epoch milliseconds. Never goes backwards.
    fn now_ms(&self) -> Millis;

    /// A future that completes once `now_ms() >= deadline`.
    fn sleep_until(&self, deadline: Millis) -> Sleep;
}

/// The real clock: the wall-clock time at start, advanced by a monotonic clock.
///
/// Anchoring to [`Instant`] means a wall-clock step (NTP, an operator) never makes tasks fire
/// early or twice; the price is that a running process does not follow a wall-clock change.
#[derive(Debug, Clone)]
pub struct SystemClock {
    base_epoch_ms: Millis,
    base: Instant,
}

impl SystemClock {
    /// A clock anchored at the current wall-clock time.
    pub fn new() -> Self {
        let base_epoch_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        SystemClock {
            base_epoch_ms,
            base: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        self.base_epoch_ms + self.base.elapsed().as_millis() as u64
    }

    fn sleep_until(&self, deadline: Millis) -> Sleep {
        let clock = self.clone();
        Box::pin(async move {
            // Sleep to the instant, then re-read the clock: a wake-up that comes early (timer
            // rounding) goes back to sleep instead of firing.
            loop {
                let now = clock.now_ms();
                if now >= deadline {
                    return;
                }
                let target = clock.base + Duration::from_millis(deadline - clock.base_epoch_ms);
                tokio::time::sleep_until(target.into()).await;
            }
        })
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
}
