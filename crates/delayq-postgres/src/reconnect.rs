//! The backoff of a connection of its own (the LISTEN connection, the driver lock): after
//! each failure of its session, wait 100 ms doubling to 3.2 s before connecting again, back
//! to 100 ms once a session got going.

use std::time::Duration;

use tokio::sync::watch;

/// The failures of one connection's sessions, and what they make it wait.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Counts a failed session (`going`: it got going before it failed) and waits before the
    /// next one; `false` when `stop` came meanwhile. `what` names the connection in the
    /// warning, logged at the first failure and at every power of two after.
    pub async fn failed(
        &mut self,
        what: &str,
        error: &str,
        going: bool,
        stop: &mut watch::Receiver<bool>,
    ) -> bool {
        if going {
            self.failures = 0;
        }
        self.failures = self.failures.saturating_add(1);
        let failures = self.failures;
        if failures == 1 || failures.is_power_of_two() {
            tracing::warn!(error, failures, "{what} failed; reconnecting");
        }
        let pause = Duration::from_millis(50u64 << failures.min(6));
        tokio::select! {
            _ = tokio::time::sleep(pause) => true,
            _ = stop.changed() => false,
        }
    }
}
