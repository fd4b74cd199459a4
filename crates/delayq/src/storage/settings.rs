//! The settings store: small values under (namespace, key) that live beside the tasks (push
//! targets, schedules and their cursors, the history of instances), shared by every instance
//! in Redis mode, with notices of their changes.

use async_trait::async_trait;

use crate::error::Result;

/// Durable (namespace, key) → bytes. A backend calls [`SettingsChanges::notify`] of its
/// context after each change it makes.
#[async_trait]
pub trait SettingsStore: Send + Sync + 'static {
    /// Stores `value` under (`namespace`, `key`) durably, replacing what was there.
    async fn put(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<()>;

    /// Every (key, value) stored under `namespace`, in key order.
    async fn list(&self, namespace: &str) -> Result<Vec<(String, Vec<u8>)>>;

    /// Removes (`namespace`, `key`); whether it was there.
    async fn delete(&self, namespace: &str, key: &str) -> Result<bool>;
}

/// Change notices of the settings store ([`SettingsStore::put`] and [`SettingsStore::delete`]), per namespace.
///
/// The push dispatcher and the scheduler keep what they read from the settings store and
/// read it again when it changes. A backend calls [`SettingsChanges::notify`] after each
/// change it makes; in Redis mode the change also reaches the other instances over the events
/// channel, so they need not poll Redis to see it (DESIGN §6 allows an idle instance 5 Redis
/// commands a second). Notices can be lost (a dropped subscription), so readers still read
/// again now and then; after a resubscription the backend calls
/// [`SettingsChanges::notify_all`].
#[derive(Debug, Default)]
pub struct SettingsChanges {
    namespaces:
        parking_lot::Mutex<std::collections::HashMap<String, tokio::sync::watch::Sender<u64>>>,
}

impl SettingsChanges {
    /// A receiver that sees a new value each time `namespace` changes.
    pub fn subscribe(&self, namespace: &str) -> tokio::sync::watch::Receiver<u64> {
        self.namespaces
            .lock()
            .entry(namespace.to_owned())
            .or_insert_with(|| tokio::sync::watch::Sender::new(0))
            .subscribe()
    }

    /// Records that `namespace` changed; its subscribers wake.
    pub fn notify(&self, namespace: &str) {
        if let Some(tx) = self.namespaces.lock().get(namespace) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Records that any namespace may have changed (notices may have been lost).
    pub fn notify_all(&self) {
        for tx in self.namespaces.lock().values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}
