//! The settings store of the memory and embedded backends: (namespace, key) → bytes in a map
//! of its own beside the task shards, each change handed to a [`Journal`] of its own (the
//! embedded backend's `settings/` log; nothing for the memory backend).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Journal;
use crate::error::{Error, Result};
use crate::storage::SettingsChanges;

/// The values, keyed by (namespace, key).
pub type SettingsMap = BTreeMap<(Box<str>, Box<str>), Vec<u8>>;

/// The settings and their journal, under one lock so that the journal's order is the order
/// the changes were applied.
pub struct SettingsState<J> {
    /// The values.
    pub values: SettingsMap,
    /// Where each change is written.
    pub journal: J,
}

/// The settings store of an engine. See the module doc.
pub struct Settings<J: Journal> {
    state: Mutex<SettingsState<J>>,
    changes: Arc<SettingsChanges>,
}

impl<J: Journal> Settings<J> {
    /// A store holding `values` (empty, or restored from disk), writing changes to `journal`
    /// and announcing them on `changes`.
    pub fn new(values: SettingsMap, journal: J, changes: Arc<SettingsChanges>) -> Self {
        Settings {
            state: Mutex::new(SettingsState { values, journal }),
            changes,
        }
    }

    /// Runs `f` under the store's lock (snapshots).
    pub(crate) fn with_state<R>(&self, f: impl FnOnce(&mut SettingsState<J>) -> R) -> R {
        f(&mut self.state.lock())
    }

    /// Stores `value` under (`namespace`, `key`), durably per the journal.
    pub(crate) async fn put(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<()> {
        self.change(|s| {
            s.journal.put_meta(namespace, key, &value);
            s.values.insert((namespace.into(), key.into()), value);
            true
        })
        .await?;
        self.changes.notify(namespace);
        Ok(())
    }

    /// Removes (`namespace`, `key`); whether it was there.
    pub(crate) async fn delete(&self, namespace: &str, key: &str) -> Result<bool> {
        let removed = self
            .change(|s| {
                let k: (Box<str>, Box<str>) = (namespace.into(), key.into());
                let was = s.values.remove(&k).is_some();
                if was {
                    s.journal.delete_meta(namespace, key);
                }
                was
            })
            .await?;
        if removed {
            self.changes.notify(namespace);
        }
        Ok(removed)
    }

    /// Applies `op` under the lock, then waits outside it until its change is durable.
    async fn change(&self, op: impl FnOnce(&mut SettingsState<J>) -> bool) -> Result<bool> {
        let (result, ticket) = {
            let mut s = self.state.lock();
            s.journal.check()?;
            let result = op(&mut s);
            (result, s.journal.commit())
        };
        if let Some(ticket) = ticket {
            // Applied in memory, not made durable: a restart may or may not bring it back.
            J::wait(ticket).await.map_err(Error::outcome_unknown)?;
        }
        Ok(result)
    }

    /// Every (key, value) of `namespace`, in key order.
    pub(crate) fn list(&self, namespace: &str) -> Vec<(String, Vec<u8>)> {
        let start: (Box<str>, Box<str>) = (namespace.into(), "".into());
        self.state
            .lock()
            .values
            .range(start..)
            .take_while(|((ns, _), _)| &**ns == namespace)
            .map(|((_, k), v)| (k.to_string(), v.clone()))
            .collect()
    }

    /// Whether the journal takes changes.
    pub(crate) fn check(&self) -> Result<()> {
        self.state.lock().journal.check()
    }

    /// Makes everything durable.
    pub(crate) fn close(&self) -> Result<()> {
        self.state.lock().journal.close()
    }
}
