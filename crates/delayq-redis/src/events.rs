//! The events channel: one subscription per instance, so that long-polls need no Redis
//! connection of their own.
//!
//! Scripts publish on `<prefix>:events`, one short text message per script run that has
//! something to tell, with the origin instance so that it can skip its own (it handled them
//! when the script returned):
//!
//! | message                         | meaning                              | subscriber does                |
//! |---------------------------------|--------------------------------------|--------------------------------|
//! | `r <origin> <topic> <n>`        | n tasks of the topic became READY    | wakes up to n parked consumers |
//! | `w <origin> <topic> <p> <at>`   | partition p has a timer at `at`      | wakes the promoter if held     |
//! | `t <origin> <topic> <n>`        | a new topic with n partitions        | tells the promoter             |
//! | `m <origin> <namespace>`        | a settings namespace changed         | wakes its readers              |
//!
//! Pub/sub is fire-and-forget: a message sent while the subscription is down is lost. So
//! after every (re)subscription the promoter rereads the registry and looks at every
//! partition it holds, every parked consumer looks for ready tasks once more, and after a
//! resubscription every reader of the settings store reads again.

use std::sync::Arc;
use std::time::Duration;

use delayq::Millis;
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::promoter::Event;
use crate::storage::InstanceState;

/// One message of the events channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Message<'a> {
    Ready {
        origin: &'a str,
        topic: &'a str,
        count: usize,
    },
    Wake {
        origin: &'a str,
        topic: &'a str,
        partition: u32,
        at: Millis,
    },
    Topic {
        origin: &'a str,
        topic: &'a str,
        partitions: u32,
    },
    Settings {
        origin: &'a str,
        namespace: &'a str,
    },
}

impl<'a> Message<'a> {
    /// Parses a message; `None` for anything else (a newer version's message, noise).
    pub fn parse(text: &'a str) -> Option<Message<'a>> {
        let mut words = text.split(' ');
        let kind = words.next()?;
        let origin = words.next()?;
        let topic = words.next()?;
        let msg = match kind {
            "r" => Message::Ready {
                origin,
                topic,
                count: words.next()?.parse().ok()?,
            },
            "w" => Message::Wake {
                origin,
                topic,
                partition: words.next()?.parse().ok()?,
                at: words.next()?.parse().ok()?,
            },
            "t" => Message::Topic {
                origin,
                topic,
                partitions: words.next()?.parse().ok()?,
            },
            "m" => Message::Settings {
                origin,
                namespace: topic,
            },
            _ => return None,
        };
        words.next().is_none().then_some(msg)
    }

    fn origin(&self) -> &str {
        match self {
            Message::Ready { origin, .. }
            | Message::Wake { origin, .. }
            | Message::Topic { origin, .. }
            | Message::Settings { origin, .. } => origin,
        }
    }
}

/// Runs the subscription until `stop` turns true, resubscribing with backoff when it drops.
pub(crate) async fn run(state: Arc<InstanceState>, mut stop: watch::Receiver<bool>) {
    let mut failures: u32 = 0;
    // Whether a subscription was up before: only a resubscription may have missed notices.
    let mut subscribed_before = false;
    loop {
        // Any node will do (a cluster broadcasts PUBLISH to all of them): take the next one
        // after each failure.
        let clients = state.redis.link.pubsub_clients();
        let client = clients
            .get(failures as usize % clients.len().max(1))
            .cloned();
        let connect = async {
            let Some(client) = client else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "no Redis master known to subscribe on",
                )));
            };
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe(&state.channel).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let connected = tokio::select! {
            _ = stop.changed() => return,
            r = tokio::time::timeout(state.options.connect_timeout * 2, connect) => r,
        };
        match connected {
            Ok(Ok(pubsub)) => {
                if failures > 0 {
                    tracing::info!("event subscription is back");
                }
                failures = 0;
                // The shared connection may still hold the broken connection of before (it
                // notices only when used): make it reconnect now, before consumers are woken.
                state.redis.probe().await;
                let _ = state.promoter.send(Event::Resync);
                // Settings readers read at their start; only a gap between two
                // subscriptions can hide a change from them.
                if subscribed_before {
                    state.ctx.settings.notify_all();
                }
                subscribed_before = true;
                let mut stream = pubsub.into_on_message();
                loop {
                    tokio::select! {
                        _ = stop.changed() => return,
                        msg = stream.next() => match msg {
                            Some(msg) => handle(&state, msg.get_payload_bytes()),
                            None => break,
                        },
                    }
                }
                tracing::warn!("event subscription lost; resubscribing");
            }
            Ok(Err(e)) => {
                failures = failures.saturating_add(1);
                if failures == 1 || failures.is_multiple_of(100) {
                    tracing::warn!(error = %e, failures, "subscribing to events failed");
                }
            }
            Err(_) => {
                failures = failures.saturating_add(1);
                if failures == 1 || failures.is_multiple_of(100) {
                    tracing::warn!(failures, "subscribing to events timed out");
                }
            }
        }
        let backoff = Duration::from_millis(50 << failures.min(5)).min(Duration::from_secs(2));
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
    }
}

fn handle(state: &InstanceState, payload: &[u8]) {
    let Some(msg) = std::str::from_utf8(payload).ok().and_then(Message::parse) else {
        tracing::debug!(?payload, "ignoring an unknown event");
        return;
    };
    if msg.origin() == state.instance {
        return;
    }
    match msg {
        Message::Ready { topic, count, .. } => state.ctx.waiters.notify(topic, count),
        Message::Wake {
            topic,
            partition,
            at,
            ..
        } => {
            let _ = state.promoter.send(Event::Wake {
                topic: topic.to_owned(),
                partition,
                at,
            });
        }
        Message::Topic {
            topic, partitions, ..
        } => {
            let _ = state
                .promoter
                .send(Event::Topic(topic.to_owned(), partitions));
        }
        Message::Settings { namespace, .. } => state.ctx.settings.notify(namespace),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse() {
        let table: [(&str, Option<Message<'_>>); 9] = [
            (
                "r ab orders 3",
                Some(Message::Ready {
                    origin: "ab",
                    topic: "orders",
                    count: 3,
                }),
            ),
            (
                "w ab orders 7 1800000000000",
                Some(Message::Wake {
                    origin: "ab",
                    topic: "orders",
                    partition: 7,
                    at: 1_800_000_000_000,
                }),
            ),
            (
                "t ab a.b:c-d 16",
                Some(Message::Topic {
                    origin: "ab",
                    topic: "a.b:c-d",
                    partitions: 16,
                }),
            ),
            (
                "m ab push",
                Some(Message::Settings {
                    origin: "ab",
                    namespace: "push",
                }),
            ),
            ("m ab push extra", None),
            ("r ab orders", None),
            ("r ab orders x", None),
            ("w ab orders 7 1 extra", None),
            ("z ab orders 1", None),
        ];
        for (text, want) in table {
            assert_eq!(Message::parse(text), want, "{text}");
        }
    }
}
