//! Wake-ups from other instances: one connection per instance LISTENs on the schema's
//! channel (`<schema>_events`).
//!
//! Transactions send their notices with `pg_notify` before they commit, so PostgreSQL
//! delivers them only on commit (a rolled-back change wakes nobody). A notice is
//! `<instance>|<kind>|<argument>`:
//!
//! | kind | argument | the listener |
//! |------|----------|--------------|
//! | `r`  | a topic  | wakes the consumers parked on the topic (tasks became ready, a slot freed, a pause ended) |
//! | `s`  | a namespace | tells the settings readers that the namespace changed |
//! | `t`  | a due time | wakes the driver if it sleeps past it (a timer an application's own transaction made: `delayq.add`, `.cancel`, `.reschedule`) |
//!
//! The sender is an instance's id, or `sql` for the SQL API called by an application (no
//! instance applies its effects locally, so every instance hears of its timers). Notices an
//! instance sent are skipped when they come back to it (it applied them locally already). When the connection breaks, the listener reconnects with backoff; notices sent
//! meanwhile are lost, so after reconnecting it wakes the driver and tells every settings
//! reader to read again (parked consumers wake at their timeout or on the next notice).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio_postgres::AsyncMessage;

use crate::storage::Inner;

/// The listener's loop, until `stop`.
pub(crate) async fn listen(
    inner: Arc<Inner>,
    connector: crate::Connector,
    mut stop: watch::Receiver<bool>,
) {
    let mut failures: u32 = 0;
    let mut first = true;
    loop {
        if *stop.borrow() {
            return;
        }
        match session(&inner, &connector, first, &mut stop).await {
            Ok(()) => return, // stopped
            Err(e) => {
                failures = failures.saturating_add(1);
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(error = %e, failures, "the LISTEN connection failed; reconnecting");
                }
            }
        }
        first = false;
        let pause = Duration::from_millis(50u64 << failures.min(6));
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One LISTEN connection, until it fails (`Err`) or `stop` (`Ok`).
async fn session(
    inner: &Inner,
    connector: &crate::Connector,
    first: bool,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let (client, mut conn) = connector.connect().await.map_err(|e| e.to_string())?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Result<String, String>>();
    let pump = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(Ok(n.payload().to_owned())).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    return;
                }
            }
        }
        let _ = tx.send(Err("the connection closed".to_owned()));
    });
    let result = async {
        client
            .batch_execute(&format!("LISTEN {}", inner.channel))
            .await
            .map_err(|e| e.to_string())?;
        if !first {
            // Notices may have been lost while disconnected.
            inner.driver.wake();
            inner.ctx.settings.notify_all();
        }
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some(Ok(payload)) => handle(inner, &payload),
                    Some(Err(e)) => return Err(e),
                    None => return Err("the connection closed".to_owned()),
                },
                _ = stop.changed() => return Ok(()),
            }
        }
    }
    .await;
    pump.abort();
    result
}

/// Acts on one notice.
fn handle(inner: &Inner, payload: &str) {
    let mut parts = payload.splitn(3, '|');
    let (Some(from), Some(kind), Some(arg)) = (parts.next(), parts.next(), parts.next()) else {
        tracing::debug!(payload, "a notice of an unknown form");
        return;
    };
    if from == inner.instance {
        return;
    }
    match kind {
        "r" => inner.ctx.waiters.notify(arg, usize::MAX),
        "s" => inner.ctx.settings.notify(arg),
        "t" => match arg.parse::<u64>() {
            Ok(at) => inner.driver.wake_if_earlier(at),
            Err(_) => inner.driver.wake(),
        },
        _ => tracing::debug!(payload, "a notice of an unknown kind"),
    }
}
