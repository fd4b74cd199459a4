//! A backend as the set of its concerns, which [`Queue`](crate::Queue) holds.

use std::sync::Arc;

use super::{BeanstalkOps, JobIds, SettingsStore, TaskStore};

/// One implementation of each storage concern. The built-in backends implement all four on
/// one type and convert with `From<Arc<_>>`; a backend may also combine implementations of
/// different types (for example its settings in another store) with [`Backend::new`].
#[derive(Clone)]
pub struct Backend {
    tasks: Arc<dyn TaskStore>,
    settings: Arc<dyn SettingsStore>,
    job_ids: Arc<dyn JobIds>,
    beanstalk: Arc<dyn BeanstalkOps>,
}

impl Backend {
    /// A backend of these parts.
    pub fn new(
        tasks: Arc<dyn TaskStore>,
        settings: Arc<dyn SettingsStore>,
        job_ids: Arc<dyn JobIds>,
        beanstalk: Arc<dyn BeanstalkOps>,
    ) -> Self {
        Backend {
            tasks,
            settings,
            job_ids,
            beanstalk,
        }
    }

    /// The tasks: transitions and reads.
    pub fn tasks(&self) -> &Arc<dyn TaskStore> {
        &self.tasks
    }

    /// The settings store.
    pub fn settings(&self) -> &Arc<dyn SettingsStore> {
        &self.settings
    }

    /// The job id counter.
    pub fn job_ids(&self) -> &Arc<dyn JobIds> {
        &self.job_ids
    }

    /// The beanstalkd extras.
    pub fn beanstalk(&self) -> &Arc<dyn BeanstalkOps> {
        &self.beanstalk
    }

    /// This instance's id when several instances share the storage
    /// ([`TaskStore::instance`]).
    pub fn instance(&self) -> Option<String> {
        self.tasks.instance()
    }
}

impl<S> From<Arc<S>> for Backend
where
    S: TaskStore + SettingsStore + JobIds + BeanstalkOps,
{
    fn from(storage: Arc<S>) -> Self {
        Backend {
            tasks: storage.clone(),
            settings: storage.clone(),
            job_ids: storage.clone(),
            beanstalk: storage,
        }
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("instance", &self.instance())
            .finish_non_exhaustive()
    }
}
