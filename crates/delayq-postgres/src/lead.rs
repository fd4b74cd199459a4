//! Which instance's driver is prompt: the holder of the schema's driver lock.
//!
//! Every instance runs a driver, and they all read the same next timer. If every driver
//! ticked at every timer, N instances would run N ticks for each due instant and all but
//! one would find the rows taken (measured with two instances at 500 tasks/s: up to 2.5
//! ticks a task, each tick seven statements and a commit). So one instance at a time
//! *leads*: it holds a session-level advisory lock (keyed by the schema)
//! on a connection of its own and ticks when its timers are due. The others *follow*: they
//! tick [`FOLLOW_GRACE_MS`] after each timer, which finds nothing while the lead is well and
//! bounds the lateness when it is not (alive, its lock held, but its ticks failing or stuck).
//!
//! A follower asks for the lock every [`POLL`] (`pg_try_advisory_lock`, one statement that
//! does not wait). It does not wait for it inside PostgreSQL: a statement blocked on a lock
//! holds its snapshot, and a snapshot held for hours keeps every dead row of the database
//! from being pruned, so that each tick's index scans walked more of them (measured: the next
//! timer's read went from 0.06 ms to 7.3 ms a call after 64 000 tasks). When the lead
//! dies, its backend ends and PostgreSQL releases the lock; a follower leads at its next ask,
//! and until then its ticks a grace after each timer keep the lateness under
//! [`FOLLOW_GRACE_MS`]. After a failover or restart of the server every instance's lock
//! connection breaks; each reconnects and one of them leads again. Two instances may both
//! believe they lead for a moment (one whose lock connection broke silently, until its next
//! check every [`CHECK`] gets no answer within as long again): that costs ticks that find
//! nothing, never a change made twice, since every tick's rows are taken with `SKIP LOCKED`
//! in its own transaction. The lock decides only who is prompt, never who may act.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::reconnect::Backoff;
use crate::storage::Inner;

/// How long after a timer a follower's driver looks at it (see the module doc).
pub const FOLLOW_GRACE_MS: u64 = 250;

/// How often a follower asks for the lock.
const POLL: Duration = Duration::from_secs(1);

/// How often the lead checks that its lock connection still works.
const CHECK: Duration = Duration::from_secs(5);

/// The lock's key: the schema's, so deployments in two schemas of one database each have
/// their own lead.
fn lock_name(schema: &str) -> String {
    format!("delayq driver {schema}")
}

/// The lock's loop, until `stop`: ask for the lock, lead while the connection holds it,
/// reconnect with backoff when it breaks.
pub(crate) async fn hold(
    inner: Arc<Inner>,
    connector: crate::Connector,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    while !*stop.borrow() {
        let mut led = false;
        let result = session(&inner, &connector, &mut led, &mut stop).await;
        inner.driver.set_leads(false);
        let Err(e) = result else { return };
        if !backoff
            .failed("the driver lock's connection", &e, led, &mut stop)
            .await
        {
            return;
        }
    }
}

/// One lock connection, until it fails (`Err`) or `stop` (`Ok`). `led` becomes true once it
/// holds the lock.
async fn session(
    inner: &Inner,
    connector: &crate::Connector,
    led: &mut bool,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let (client, conn) = connector.connect().await.map_err(|e| e.to_string())?;
    let mut conn = tokio::spawn(conn);
    let ended = |r: Result<Result<(), tokio_postgres::Error>, tokio::task::JoinError>| match r {
        Ok(Err(e)) => e.to_string(),
        _ => "the connection closed".to_owned(),
    };
    let result = async {
        // The lead's session is idle for as long as it leads: a timeout of the database's or
        // the role's must not end it (PostgreSQL 14 and later have one).
        let quiet = client.batch_execute(
            "SELECT set_config('idle_session_timeout', '0', false) \
             WHERE current_setting('server_version_num')::int >= 140000",
        );
        if answer(quiet, stop).await?.is_none() {
            return Ok(());
        }
        let name = lock_name(&inner.options.schema);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&name];
        loop {
            let ask = client.query_one("SELECT pg_try_advisory_lock(hashtext($1))", &params);
            let Some(row) = answer(ask, stop).await? else {
                return Ok(());
            };
            if row.get::<_, bool>(0) {
                break;
            }
            tokio::select! {
                r = &mut conn => return Err(ended(r)),
                _ = tokio::time::sleep(POLL) => {}
                _ = stop.changed() => return Ok(()),
            }
        }
        *led = true;
        inner.driver.set_leads(true);
        // It may have slept past timers as a follower: look now.
        inner.driver.wake();
        tracing::info!("this instance leads the time-driven work");
        loop {
            tokio::select! {
                r = &mut conn => return Err(ended(r)),
                _ = tokio::time::sleep(CHECK) => {
                    if answer(client.simple_query(""), stop).await?.is_none() {
                        return Ok(());
                    }
                }
                _ = stop.changed() => return Ok(()),
            }
        }
    }
    .await;
    conn.abort();
    result
}

/// The answer to a statement on the lock connection: `None` once `stop` came, an error when
/// it failed or did not come within [`CHECK`] (a connection lost without a word, which TCP
/// would report only much later; the lead must not go on believing it leads, and a shutdown
/// must not wait for it).
async fn answer<T>(
    statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<T>, String> {
    tokio::select! {
        r = tokio::time::timeout(CHECK, statement) => match r {
            Ok(r) => r.map(Some).map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer on the driver lock's connection within {CHECK:?}")),
        },
        _ = stop.changed() => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::lock_name;

    /// Two schemas of one database lock apart; the name is not the migration lock's.
    #[test]
    fn each_schema_has_its_own_lock() {
        assert_ne!(lock_name("delayq"), lock_name("other"));
        assert_ne!(
            lock_name("delayq"),
            crate::schema::migration_lock_name("delayq")
        );
    }
}
