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
//! | `t`  | a due time | wakes the driver if it sleeps past it (a timer an application's own transaction made: `delayq.add`, `.cancel`, `.reschedule`; or one a follower made, for the lead: `crate::lead`) |
//!
//! The sender is an instance's id, or `sql` for the SQL API called by an application (no
//! instance applies its effects locally, so every instance hears of its timers). Notices an
//! instance sent are skipped when they come back to it (it applied them locally already).
//!
//! # Reconnecting
//!
//! When the connection breaks (the server restarted, a failover, a network fault, its
//! backend terminated), the listener reconnects with backoff (100 ms doubling to 3.2 s, back
//! to 100 ms once a connection listened). With a multi-host URL and
//! `target_session_attrs=read-write` the new connection goes to whichever server accepts
//! writes now, the promoted replica after a failover. Notices sent while it was away are
//! lost, so once it listens again it makes up for all of them at once: every parked consumer
//! of every topic wakes and looks again, the driver re-reads its next timer, and every
//! settings reader reads again. A connection that was lost silently (half-open) is not seen
//! until TCP says so; parked consumers still wake at their timeout meanwhile.

use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::{mpsc, watch};
use tokio_postgres::AsyncMessage;

use crate::reconnect::Backoff;
use crate::storage::Inner;

/// The listener's loop, until `stop`.
pub(crate) async fn listen(
    inner: Arc<Inner>,
    connector: crate::Connector,
    mut stop: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::default();
    let mut listened_before = false;
    while !*stop.borrow() {
        let mut listened = false;
        let result = session(
            &inner,
            &connector,
            listened_before,
            &mut listened,
            &mut stop,
        );
        let Err(e) = result.await else { return };
        listened_before |= listened;
        if !backoff
            .failed("the LISTEN connection", &e, listened, &mut stop)
            .await
        {
            return;
        }
    }
}

/// One LISTEN connection, until it fails (`Err`) or `stop` (`Ok`). `listened` becomes true
/// once it listens; `listened_before`: a connection listened before this one (so there was a
/// gap).
async fn session(
    inner: &Inner,
    connector: &crate::Connector,
    listened_before: bool,
    listened: &mut bool,
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
        *listened = true;
        // Notices may have been lost while no connection listened (before the first one too:
        // consumers may park as soon as the backend started): make up for all of them.
        // Settings readers read at their start, so only a gap between two connections can
        // hide a change from them.
        inner.driver.wake();
        inner.ctx.waiters.notify_all();
        if listened_before {
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
