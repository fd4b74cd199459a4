//! The reference clock of all instances on one database: PostgreSQL's `clock_timestamp()`.
//!
//! Instances on different machines disagree about the wall-clock time; a task added through
//! one and handed out by another must still never be early, so every instance reads the
//! database's clock. [`PostgresClock`] is a [`ReferenceClock`] (the interval over the local
//! monotonic clock, its safe-side readings and its refusals are described there) fed by a
//! probe of `clock_timestamp()` (µs) every [`PostgresClockOptions::refresh`] over a
//! connection of its own, so a busy pool never delays a probe.

pub use delayq::clock::ReferenceClockOptions as PostgresClockOptions;
use delayq::clock::{ReferenceClock, WeakReferenceClock};
use tokio_postgres::Client;

use crate::options::PostgresOptions;

/// What the clock reads, in its messages.
const SOURCE: &str = "PostgreSQL clock_timestamp()";

/// The database's clock: a [`ReferenceClock`] that [`connect`] feeds.
pub type PostgresClock = ReferenceClock;

/// A clock of the database's time that knows nothing yet: it refuses until [`connect`] has
/// given it a database to probe and a probe succeeded.
pub fn new_clock(options: PostgresClockOptions) -> PostgresClock {
    ReferenceClock::new(options, SOURCE)
}

/// Starts probing the database of `options` with `clock` every
/// [`PostgresClockOptions::refresh`], until every clone of the clock is dropped. The database
/// need not be reachable yet: the clock refuses until a probe succeeds. A bad URL is an
/// [`delayq::Error::Invalid`] naming it. Must be called inside a tokio runtime.
pub fn connect(clock: &PostgresClock, options: &PostgresOptions) -> Result<(), delayq::Error> {
    let connector = crate::connector(options)?;
    tokio::spawn(probe_loop(clock.downgrade(), connector));
    Ok(())
}

/// Probes until the clock is gone, reconnecting after a failure.
async fn probe_loop(clock: WeakReferenceClock, connector: crate::Connector) {
    let mut client: Option<Client> = None;
    loop {
        let Some(strong) = clock.upgrade() else {
            return;
        };
        if client.as_ref().is_none_or(Client::is_closed) {
            client = match connector.connect().await {
                Ok((c, conn)) => {
                    tokio::spawn(conn);
                    Some(c)
                }
                Err(e) => {
                    strong.record_failure(format!("connecting: {e}"));
                    None
                }
            };
        }
        if let Some(c) = &client
            && let Err(e) = probe(&strong, c).await
        {
            strong.record_failure(e);
        }
        let refresh = strong.options().refresh;
        drop(strong);
        tokio::time::sleep(refresh).await;
    }
}

/// Reads `clock_timestamp()` once and records the answer in `clock`.
async fn probe(clock: &ReferenceClock, client: &Client) -> Result<(), String> {
    let max_rtt = clock.options().max_rtt;
    let t_send = clock.local_ns();
    let answer = tokio::time::timeout(
        max_rtt,
        client.query_one(
            "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint",
            &[],
        ),
    )
    .await;
    let t_recv = clock.local_ns();
    let micros: i64 = match answer {
        Ok(Ok(row)) => row.get(0),
        Ok(Err(e)) => return Err(format!("clock_timestamp() failed: {e}")),
        Err(_) => return Err(clock.too_slow()),
    };
    let ns = u64::try_from(micros).unwrap_or(0).saturating_mul(1_000);
    // clock_timestamp() has µs resolution.
    clock.record_probe(t_send, t_recv, ns, 1_000);
    Ok(())
}
