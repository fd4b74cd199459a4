//! The tubes beanstalk clients see, with the counters beanstalkd keeps per tube.
//!
//! A tube is a delayq topic; its jobs live in the storage. What beanstalkd also keeps per
//! tube (how many connections use, watch and wait on it, its `total-jobs`, `cmd-delete`,
//! `cmd-pause-tube` and the last pause's length) is connection state, kept here in process
//! memory. beanstalkd lists tubes in the order they were made and frees a tube when no
//! connection and no job refers to it any more, moving the last tube of its list into the
//! freed place (`ms_delete`); this registry does the same, so `list-tubes` answers in
//! beanstalkd's order. `default` always exists.

use parking_lot::Mutex;

/// One tube's connection counters.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tube {
    pub name: String,
    pub using: u64,
    pub watching: u64,
    pub waiting: u64,
    pub total_jobs: u64,
    pub cmd_delete: u64,
    pub cmd_pause_tube: u64,
    /// The last `pause-tube`'s length in seconds.
    pub pause_secs: u64,
}

impl Tube {
    fn referenced(&self) -> bool {
        self.name == "default" || self.using > 0 || self.watching > 0 || self.waiting > 0
    }
}

/// The registry.
#[derive(Debug)]
pub(crate) struct Tubes {
    list: Mutex<Vec<Tube>>,
}

impl Tubes {
    pub fn new() -> Tubes {
        Tubes {
            list: Mutex::new(vec![Tube {
                name: "default".into(),
                ..Tube::default()
            }]),
        }
    }

    /// Runs `f` on the tube `name`, making it first when it does not exist.
    pub fn with<T>(&self, name: &str, f: impl FnOnce(&mut Tube) -> T) -> T {
        let mut list = self.list.lock();
        let i = match list.iter().position(|t| t.name == name) {
            Some(i) => i,
            None => {
                list.push(Tube {
                    name: name.to_owned(),
                    ..Tube::default()
                });
                list.len() - 1
            }
        };
        f(&mut list[i])
    }

    /// A copy of the tube `name` if it exists here.
    pub fn get(&self, name: &str) -> Option<Tube> {
        self.list.lock().iter().find(|t| t.name == name).cloned()
    }

    /// Frees the tube `name` if no connection refers to it and `has_jobs` says it holds no
    /// job (beanstalkd's `tube_dref` reaching zero).
    pub fn free_if_unused(&self, name: &str, has_jobs: bool) {
        if has_jobs {
            return;
        }
        let mut list = self.list.lock();
        if let Some(i) = list.iter().position(|t| t.name == name)
            && !list[i].referenced()
        {
            list.swap_remove(i);
        }
    }

    /// Whether a connection refers to `name`.
    pub fn is_referenced(&self, name: &str) -> bool {
        self.list
            .lock()
            .iter()
            .any(|t| t.name == name && t.referenced())
    }

    /// The tubes in list order, after freeing those without connections or jobs and adding
    /// the topics that hold jobs but are not listed yet (made over HTTP, or before a restart),
    /// in name order. `with_jobs` is every topic that holds a job, in name order.
    pub fn reconcile(&self, with_jobs: &[String]) -> Vec<Tube> {
        let mut list = self.list.lock();
        let mut i = 0;
        while i < list.len() {
            if !list[i].referenced() && with_jobs.binary_search(&list[i].name).is_err() {
                list.swap_remove(i);
            } else {
                i += 1;
            }
        }
        for name in with_jobs {
            if !list.iter().any(|t| &t.name == name) {
                list.push(Tube {
                    name: name.clone(),
                    ..Tube::default()
                });
            }
        }
        list.clone()
    }
}
